"""Flags and set-up every command shares, so each command module stays about its own job.

Registering a command's flags imports nothing heavy: the engine, settings models and botocore are imported
when a command opens its target, so ``fmdoctor --version`` or ``--help`` never pays for them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.errors import UsageError
from fmdoctor.words import suggest

if TYPE_CHECKING:
    from fmdoctor.engine.api import Doctor


class ArgumentParser(argparse.ArgumentParser):
    """Bad usage exits 3 ('unknown'): exit 2 means 'critical' to monitoring systems and CI."""

    def error(self, message: str) -> None:  # type: ignore[override]
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        close = suggest(choice.group(1), re.findall(r"'([^']*)'", choice.group(2))) if choice else []
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(message, hint=f"{hint}see '{self.prog} --help'")


def endpoint_url(text: str) -> str:
    """--endpoint-url: an http(s) URL with a host (botocore would fail on 'localhost:5000' with a traceback)."""
    parsed = urllib.parse.urlsplit(text.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL: give the scheme and host, e.g. "
                                         "http://127.0.0.1:5000")
    return text.strip()


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("AWS connection")
    group.add_argument("--region", help="AWS region (default: config, then AWS_REGION / profile)")
    group.add_argument("--profile", help="AWS named profile (default: AWS_PROFILE)")
    group.add_argument("--endpoint-url", type=endpoint_url,
                       help="send every AWS call here (e.g. a moto server); AWS_ENDPOINT_URL too")
    group.add_argument("--config", help="fmdoctor.yaml to read (default: FMDOCTOR_CONFIG, ./fmdoctor.yaml, "
                       "~/.config/fmdoctor/fmdoctor.yaml)")


def add_target_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", help="cluster name: the tag value on its instances (FMDOCTOR_CLUSTER)")
    parser.add_argument("--demo", action="store_true",
                        help="run against the embedded demo cluster (moto in-process; no AWS account needed)")


def split_ids(values: list[str] | None, flag: str = "--only") -> list[str] | None:
    """'--only a,b --only c' -> ['a', 'b', 'c']; '--only ""' is a mistake, not 'every check'."""
    if values is None:
        return None
    ids = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if not ids:
        raise UsageError(f"{flag} was given nothing: it needs at least one value",
                         hint="leave it out to mean 'all'" if flag == "--only" else f"see '{flag}' in --help")
    return ids


@dataclass
class Target:
    doctor: Doctor
    cluster: str
    demo: bool = False


def check_target_args(args: argparse.Namespace) -> None:
    """What can be refused from the flags alone: an empty --cluster, a --region botocore does not know."""
    named = getattr(args, "cluster", None)
    if named is not None and not named.strip():
        raise UsageError("--cluster needs a name", hint="leave it out to use FMDOCTOR_CLUSTER or the configured one")
    if getattr(args, "region", None) and not getattr(args, "endpoint_url", None):
        from fmdoctor.engine.regions import check_region

        check_region(args.region, "--region")


class BackgroundTarget:
    """:func:`open_target` in a thread of its own, so a server can answer its clients while the demo world is
    seeded (seconds); whatever needs the target calls :meth:`wait`. The flags are checked before the thread
    starts, so their mistakes still stop the command at once. :meth:`close` leaves the target (moto, the demo's
    Prometheus) and waits for that."""

    def __init__(self, args: argparse.Namespace, overrides: dict[str, Any] | None = None):
        check_target_args(args)
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._target: Target | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._hold, args=(args, overrides), name="fmdoctor-target")

    def start(self) -> BackgroundTarget:
        self._thread.start()
        return self

    def _hold(self, args: argparse.Namespace, overrides: dict[str, Any] | None) -> None:
        try:
            with open_target(args, overrides) as target:
                self._target = target
                self.ready.set()
                self._stop.wait()
        except BaseException as exc:  # kept for wait(); the thread itself has nowhere to report it
            if self._target is None:
                self._error = exc
        finally:
            self.ready.set()

    def wait(self) -> Target:
        """The target once it is open; its error if it could not be opened (raised to every caller)."""
        self.ready.wait()
        if self._target is None:
            raise self._error or RuntimeError("the target was closed before it opened")
        return self._target

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


# What a --config file may set under --demo: how fmdoctor runs, not which cluster or account it looks at.
DEMO_APPLIES = ("aws", "max_workers", "runbooks_dir", "agent", "slack", "fleet", "export", "serve")


def with_demo_config(demo: Any, path: str | None, stream: Any = None) -> Any:
    """The demo's settings with what ``--config FILE`` says about how fmdoctor runs (:data:`DEMO_APPLIES`). The
    file is read and validated as without --demo (a missing file, invalid YAML or a mistyped key stop the
    command); what it says about clusters and accounts is not applied, and a line on stderr says so."""
    import sys

    from fmdoctor.config import load_settings

    if not path:
        return demo
    if not os.path.isfile(path):
        from fmdoctor.engine.errors import ConfigError

        raise ConfigError(f"--config {path}: no such file", hint="give the path of an fmdoctor.yaml, or leave "
                          "--config out to run the demo with its own settings")
    given = load_settings(path)
    applied = [f for f in DEMO_APPLIES if f in given.model_fields_set]
    ignored = sorted(f for f in given.model_fields_set - set(DEMO_APPLIES) if f != "source")
    (stream or sys.stderr).write(
        f"fmdoctor: --demo with --config {path}: applied {', '.join(applied) or 'nothing it sets'}"
        + (f"; not applied: {', '.join(ignored)} (they describe your clusters, not the demo's)" if ignored else "")
        + "\n")
    return demo.model_copy(update={f: getattr(given, f) for f in applied})


@contextlib.contextmanager
def open_target(args: argparse.Namespace, overrides: dict[str, Any] | None = None) -> Iterator[Target]:
    """Settings + connection + cluster name from flags/env/config; with --demo, the seeded demo cluster.

    A --region botocore does not know is refused here, before the demo is seeded or AWS is called.
    """
    from fmdoctor.config import load_settings
    from fmdoctor.engine.api import Connection, Doctor

    check_target_args(args)
    if getattr(args, "demo", False):
        from fmdoctor.demo.runtime import demo_environment, demo_settings

        with demo_environment() as world:
            settings = with_demo_config(demo_settings(world), getattr(args, "config", None))
            doctor = Doctor(settings=settings, connection=Connection(region=world.region), overrides=overrides or {})
            doctor.extras["demo"] = world
            yield Target(doctor, args.cluster or world.cluster, demo=True)
        return
    settings = load_settings(getattr(args, "config", None))
    connection = Connection(
        region=getattr(args, "region", None) or os.environ.get("FMDOCTOR_REGION"),
        profile=getattr(args, "profile", None),
        endpoint_url=getattr(args, "endpoint_url", None),
    )
    doctor = Doctor(settings=settings, connection=connection, overrides=overrides or {})
    cluster = doctor.resolve_cluster(getattr(args, "cluster", None) or os.environ.get("FMDOCTOR_CLUSTER"))
    yield Target(doctor, cluster)
