"""Run fmdoctor against the demo: moto in-process, no AWS account, no network."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from unittest import mock

import boto3

from fmdoctor.config import Settings
from fmdoctor.demo import prometheus_server
from fmdoctor.demo.scenario import DEMO_CLUSTER, DemoWorld, seed_demo
from fmdoctor.demo.scheduler import demo_scheduler
from fmdoctor.engine import api
from fmdoctor.engine.errors import FmdoctorError

# Variables that would point the demo at a real account or endpoint.
_SCRUBBED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN",
             "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")
_FAKE = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-west-2"}


# Every account/region is a new moto backend, and loading moto's sample AMIs into each is most of the cost
# of seeding a fleet (and a second of the demo's); no check reads AMIs (run_instances does not validate the
# image id by default, and an instance whose image moto lacks differs only in fields no check reads).
LEAN_MOTO_ENV = {"MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}


def _shared_loader(search_path_string: str | None = None) -> Any:
    """The engine's loader, for every session made while the demo runs (moto's own models keep moto's loader).

    Each session (moto's import and backends, the seeders', the run's) would build its own loader and parse again
    the service models it uses: EC2's is megabytes of JSON, and ``check --demo`` parsed it seven times. Clients
    only read those models, so one loader for the process parses each once.
    """
    from botocore.loaders import create_loader

    if search_path_string is not None:
        return create_loader(search_path_string)
    return api._SHARED_LOADER


@contextlib.contextmanager
def _sessions_share_one_loader() -> Iterator[None]:
    with mock.patch("botocore.session.create_loader", _shared_loader):
        yield


@contextlib.contextmanager
def mocked_aws(
    passthrough_services: Sequence[str] = (), extra_env: dict[str, str] | None = None
) -> Iterator[boto3.Session]:
    """moto in-process with fake credentials and nothing from the shell that points at a real account.

    ``passthrough_services`` reach the real AWS (e.g. ``bedrock-runtime`` for an eval against Bedrock, whose
    client must be made before this starts so it keeps the real credentials); ``extra_env`` tunes moto
    (e.g. :data:`LEAN_MOTO_ENV`)."""
    with _sessions_share_one_loader():  # moto's import makes sessions too
        try:
            from moto import mock_aws
        except ImportError as exc:
            raise FmdoctorError(
                "the embedded demo needs moto", hint="pip install 'fmdoctor[demo]'"
            ) from exc
        from fmdoctor.demo import moto_compat

        moto_compat.install()
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED and not k.startswith("AWS_ENDPOINT_URL_")}
    env.update(_FAKE)
    env["AWS_CONFIG_FILE"] = os.devnull
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    env.update(extra_env or {})
    config = None
    if passthrough_services:
        from moto.core.config import default_user_config

        core = dict(default_user_config.get("core", {}))
        core["passthrough"] = {"urls": [], "services": list(passthrough_services)}
        config = {"core": core}  # mock_aws replaces top-level sections, so keep the other core defaults
    with mock.patch.dict(os.environ, env, clear=True), _sessions_share_one_loader(), mock_aws(config=config):
        yield api.new_session(region="us-west-2")


@contextlib.contextmanager
def demo_environment() -> Iterator[DemoWorld]:
    """Start moto in-process, seed the demo cluster, load its HyperPod metrics into a loopback Prometheus (when
    the binary is installed), serve its scheduler view (fmdoctor.demo.scheduler) and yield it; everything is gone
    on exit."""
    with mocked_aws(extra_env=LEAN_MOTO_ENV) as session, contextlib.ExitStack() as early:
        prometheus = _EarlyPrometheus(early)
        world = seed_demo(session, moto_here=True, after_each=prometheus.start)
        with demo_prometheus(world, prometheus), demo_scheduler(world):
            yield world


class _EarlyPrometheus:
    """The demo's Prometheus, started as soon as a seeder has written its history: ``promtool``'s backfill then
    runs on another core while the rest of the world is seeded. Started on the seeding thread, which holds the
    demo open (the server's parent-death signal follows the thread that started it)."""

    def __init__(self, stack: contextlib.ExitStack):
        self._stack = stack
        self.ready: Callable[[], str] | None = None
        self.failed: Exception | None = None

    def start(self, world: DemoWorld) -> None:
        history = world.facts.get("prometheus_history")
        if self.ready is not None or self.failed is not None or not history or prometheus_server.binaries() is None:
            return
        try:
            self.ready = self._stack.enter_context(prometheus_server.starting_prometheus(history))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # said by demo_prometheus
            self.failed = exc


@contextlib.contextmanager
def demo_prometheus(world: DemoWorld, early: _EarlyPrometheus | None = None) -> Iterator[str | None]:
    """The HyperPod cluster's DCGM and EFA history in a real Prometheus on 127.0.0.1, set as the demo's
    ``metrics.url``; without the binary, or when it does not start, a note saying so (and those findings are not
    verified). ``early``: the server already on its way up."""
    history = world.facts.get("prometheus_history")
    if not history:
        yield None
        return
    if prometheus_server.binaries() is None:
        world.notes.append("demo: the HyperPod cluster's GPU metrics live in Prometheus (DCGM exporter), and no "
                           f"prometheus binary was found, so they are reported as not verified; "
                           f"{prometheus_server.INSTALL_HINT} and see its idle node and Xid")
        yield None
        return
    with contextlib.ExitStack() as stack:
        try:
            if early is not None and early.failed is not None:
                raise early.failed
            ready = early.ready if early is not None and early.ready is not None else stack.enter_context(
                prometheus_server.starting_prometheus(history))
            url = ready()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # the demo runs on without it
            world.notes.append(f"demo: the embedded Prometheus did not start ({str(exc)[:200]}), so the HyperPod "
                               "cluster's GPU metrics are reported as not verified")
            yield None
            return
        world.defaults["metrics"] = {"url": url}
        world.facts["prometheus_url"] = url
        try:
            yield url
        finally:
            world.defaults.pop("metrics", None)


def demo_settings(world: DemoWorld) -> Settings:
    """Settings naming only the demo cluster, so ``--cluster`` may be omitted."""
    return Settings.model_validate({"region": world.region, **world.defaults,
                                    "clusters": {world.cluster: world.settings}})


__all__ = ["DEMO_CLUSTER", "demo_environment", "demo_settings", "mocked_aws"]
