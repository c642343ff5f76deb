"""Shared fixtures: fake credentials, no traffic beyond 127.0.0.1, moto, and scenario builders."""

from __future__ import annotations

import gc
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from fmdoctor.cli.main import collect_garbage_less_often
from fmdoctor.config import Settings
from fmdoctor.demo import moto_compat
from fmdoctor.demo.builders import ClusterBuilder
from fmdoctor.engine.api import Connection, Doctor, new_session
from fmdoctor.engine.model import CheckError, Finding, Report
from fmdoctor.engine.registry import default_registry

REGION = "us-west-2"
CLUSTER = "test-cluster"

_real_connect = socket.socket.connect
_LOOPBACK = ("127.", "::1", "localhost")


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and not str(host).startswith(_LOOPBACK):
        raise RuntimeError(f"test tried to reach {address!r}: only 127.0.0.1 is allowed")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Fake credentials, no profile or endpoint from the developer's shell, no real network."""
    for key in list(os.environ):
        # FMDOCTOR_DEMO_*: set by a demo this process seeded (its loopback Slurm's token), not by the shell.
        if key.startswith(("AWS_", "FMDOCTOR_", "SLACK_")) and not key.startswith("FMDOCTOR_DEMO_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # moto without its ~1,300 default AMIs (and their snapshots) per region: every EC2 test starts several times
    # faster, and no test looks an image up (moto does not validate ImageId unless told to).
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)


@pytest.fixture
def aws() -> Iterator[boto3.Session]:
    """moto's in-process mock for one test; clients made inside it never leave the process."""
    from moto import mock_aws

    with mock_aws():
        yield test_session()


def test_session() -> boto3.Session:
    """A session like the engine's: it reuses the parsed service models and the client classes built from them."""
    return new_session(region=REGION)


@pytest.fixture
def builder(aws: boto3.Session) -> ClusterBuilder:
    """A VPC with two private subnets (two AZs) and a public one, ready for groups and nodes."""
    b = ClusterBuilder(aws.client("ec2"), CLUSTER)
    b.vpc("10.0.0.0/16")
    b.subnet("private-a", "10.0.0.0/20", f"{REGION}a")
    b.subnet("private-b", "10.0.16.0/20", f"{REGION}b")
    b.subnet("public-a", "10.0.128.0/24", f"{REGION}a")
    return b


@pytest.fixture
def sg_fault_cluster(builder: ClusterBuilder) -> ClusterBuilder:
    """Head node and two p5 nodes; the EFA group lacks its egress self-rule (one fix to plan,
    approve or reject)."""
    builder.security_group("efa", self_ingress=True)
    builder.placement_group("pg")
    builder.launch(["head"], "m5.8xlarge", "public-a", ["efa"], role="head")
    builder.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32, placement_group="pg")
    return builder


@pytest.fixture
def efa_egress_fault(builder: ClusterBuilder) -> str:
    """Two p4d nodes whose EFA group admits its own traffic in but not out: one efa-sg-self-reference finding.
    Returns the group id."""
    group = builder.security_group("efa", self_ingress=True)
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    return group


@pytest.fixture
def healthy_efa_cluster(builder: ClusterBuilder) -> ClusterBuilder:
    """Head node plus three p5 nodes with all 32 EFA interfaces, self-referencing group, one placement group;
    public-a routes to an internet gateway, the private subnets reach S3 through a gateway endpoint."""
    builder.internet_gateway(["public-a"])
    builder.route_table("private", ["private-a", "private-b"])
    builder.s3_gateway_endpoint(["private"], REGION)
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.placement_group("pg")
    builder.launch(["head"], "m5.8xlarge", "public-a", ["efa"], role="head", public_ip=True)
    builder.launch(["gpu-1", "gpu-2", "gpu-3"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32,
                   placement_group="pg")
    return builder


@pytest.fixture
def run_checks() -> Callable[..., Report]:
    """Run the real engine (real boto3, moto behind it) and return the report."""

    def run(only: list[str] | None = None, cluster: str = CLUSTER, **cluster_settings: Any) -> Report:
        settings = Settings.model_validate({"clusters": {cluster: cluster_settings}})
        return Doctor(settings=settings, connection=Connection(region=REGION)).check(cluster, only=only)

    return run



@dataclass(frozen=True)
class DemoCheck:
    """Every cluster check run once against the demo, as ``check --demo`` runs them."""

    facts: dict[str, Any]
    report: Report

    def of(self, only: Sequence[str]) -> tuple[list[Finding], list[CheckError]]:
        """The findings and errors of the checks ``--only`` would select (ids or families)."""
        ids = {check.id for check in default_registry().select(only)}
        return ([f for f in self.report.findings if f.check in ids],
                [e for e in self.report.errors if e.check in ids])


@pytest.fixture(scope="session")
def demo_check() -> DemoCheck:
    """One run of the demo (its Prometheus too) per test process, for the modules that only read what it found.
    Checks do not depend on each other, so a check's findings are the same in the whole run as alone; seeding
    the demo again for each such module cost more than their tests. moto is gone after, so nothing can read a
    stale world through it."""
    from fmdoctor.demo.runtime import demo_environment, demo_settings

    with demo_environment() as world:
        report = Doctor(settings=demo_settings(world), connection=Connection(region=world.region)).check(world.cluster)
    return DemoCheck(dict(world.facts), report)


@pytest.fixture(scope="module")
def one_demo_per_module() -> Iterator[Any]:
    """The demo seeded once for a module (its Prometheus too), handed to every ``--demo`` run of the module's tests
    in place of a new one. For modules whose tests leave the demo as they found it, and none of which needs moto
    off: moto stays on while the module runs, as the demo's own ``mocked_aws`` keeps it for one command."""
    import contextlib

    from fmdoctor.demo import runtime

    with runtime.demo_environment() as world, pytest.MonkeyPatch.context() as patch:
        patch.setattr(runtime, "demo_environment", lambda: contextlib.nullcontext(world))
        yield world


@pytest.fixture
def retry_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's retry back-off sleeps, recorded instead of slept (the retry logic itself still runs)."""
    import botocore.endpoint

    sleeps: list[float] = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", sleeps.append)
    return sleeps


@pytest.fixture
def faults(retry_sleeps: list[float]):
    from .fault_injection import FaultInjector

    return FaultInjector()


@pytest.fixture
def run_with_faults(faults) -> Callable[..., Report]:
    """Like run_checks, with ``faults`` attached to every session the engine opens."""

    def run(only: list[str] | None = None, cluster: str = CLUSTER, **cluster_settings: Any) -> Report:
        settings = Settings.model_validate({"clusters": {cluster: cluster_settings}})
        doctor = Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=faults.aws_factory)
        return doctor.check(cluster, only=only)

    return run


E2E_DIR = os.path.join(os.path.dirname(__file__), "e2e")
# A fraction of a second of walking, and a bound on the garbage a test can leave before the collector runs.
_YOUNGEST_GENERATION_THRESHOLD_DURING_TESTS = 500_000


def _runs_tests(config: pytest.Config) -> bool:
    """False only in xdist's controller, which hands every test to its workers."""
    return hasattr(config, "workerinput") or config.getoption("dist", "no") == "no"


def pytest_configure(config: pytest.Config) -> None:
    # moto's fixes and speed-ups (importing moto's EC2 models, about a second) before any test module imports
    # moto; xdist's controller starts its workers only after this hook, and needs none of it.
    if _runs_tests(config):
        moto_compat.install()
    # Test processes hold the same long-lived models as the CLI, and more: at CPython's default threshold the
    # collector's full walks were about a quarter of the fast tier's CPU (94 s of 371).
    collect_garbage_less_often()
    # Where the environment says not to write bytecode (PYTHONDONTWRITEBYTECODE, as some container images and
    # this project's development machine set), every test process, each xdist worker and each CLI a test starts,
    # compiled the modules it imports again, and pytest rewrote every test module's asserts again: about 5 s of
    # CPU for each pytest process here. The caches go to the __pycache__ folders git ignores.
    sys.dont_write_bytecode = False


def pytest_collection_finish(session: pytest.Session) -> None:
    # What importing and collecting made (modules, service models, the collected tests) lives as long as the
    # process: the collector's full walks need not visit it again.
    gc.collect()
    gc.freeze()
    # From here the collector runs at the end of each test (below); the threshold stays as a bound on the garbage
    # one test can pile up before a pass.
    gc.set_threshold(_YOUNGEST_GENERATION_THRESHOLD_DURING_TESTS, *gc.get_threshold()[1:])


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """Collect what the test and its fixtures left, then freeze what outlives them.

    A test's moto world, clients and pilots are cycles that die together when pytest drops the test's fixture
    values, just before this hook. Left to the collector's thresholds, each long-lived object was walked when
    young, again a generation older, and again at each full walk, whose heap the session's caches (moto's accounts
    and regions, botocore's models, Textual's render caches) grow past a million objects: 14-17 s of CPU in each
    xdist worker of the fast tier. Collected here, the garbage is walked once and what survives (caches, module and
    session fixtures) is frozen and never walked again: 7-10 s. What is frozen is never freed, so a module
    fixture's cycles outlive their module; a worker still ends at about 0.7 GB.

    After the last test, pytest collects five times over and Python again as it shuts down; over an unfrozen heap
    that took seconds, long enough that an xdist worker interrupted itself (a KeyboardInterrupt inside a
    collection) while the controller waited for it. Those passes now find the heap frozen. A finalizer that fails
    in a cycle a test left is reported by pytest with the next test's setup, the last test's at the end of the
    session (tests/unit/test_session_end.py).
    """
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/e2e is an end-to-end test, so `pytest -m "not e2e"` is the fast tier."""
    for item in items:
        if str(item.path).startswith(E2E_DIR + os.sep):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def fake_slack() -> Iterator[Any]:
    """A loopback fake of Slack's Web API (``fmdoctor.slack.testing.FakeSlack``) on 127.0.0.1."""
    from fmdoctor.slack.testing import start_fake_slack

    server = start_fake_slack()
    yield server
    server.shutdown()
    server.server_close()
