"""What a check sees while it runs: target, settings, clients, the shared inventory and a shared cache."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from fmdoctor.config import ClusterSettings
from fmdoctor.engine.aws import ApiCallCounter, Aws
from fmdoctor.engine.errors import FmdoctorError, describe_aws_failure
from fmdoctor.engine.host import Host
from fmdoctor.engine.inventory import Inventory
from fmdoctor.engine.model import CheckError

T = TypeVar("T")


class SharedData:
    """Per-run memo: the first check to ask for a key fetches it, concurrent askers wait and reuse it.

    Failures are memoised too, so a denied API is called once per run and every check that needed it
    reports the same error.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._values: dict[str, tuple[bool, Any]] = {}

    def get(self, key: str, loader: Callable[[], T]) -> T:
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            if key not in self._values:
                try:
                    self._values[key] = (True, loader())
                except Exception as exc:  # memoised and re-raised to every caller
                    self._values[key] = (False, exc)
            ok, value = self._values[key]
        if ok:
            return value  # type: ignore[no-any-return]
        raise value


@dataclass
class RunScope:
    """Everything shared by the checks of one run."""

    cluster: str
    settings: ClusterSettings
    aws: Aws | None
    inventory: Inventory
    now: datetime
    shared: SharedData = field(default_factory=SharedData)
    host: Host | None = None  # the node itself, in on-node mode (fmdoctor check --local)
    extras: dict[str, Any] = field(default_factory=dict)
    queries: ApiCallCounter = field(default_factory=ApiCallCounter)  # metric-source calls that are not AWS's
    # The metric families the run's checks read (Check.metrics); None: every family (a scope built by hand).
    metrics: frozenset[str] | None = None


@dataclass
class CheckContext:
    """One check's view of the run; partial failures it records are reported under its id."""

    scope: RunScope
    check_id: str
    errors: list[CheckError] = field(default_factory=list)

    @property
    def cluster(self) -> str:
        return self.scope.cluster

    @property
    def settings(self) -> ClusterSettings:
        return self.scope.settings

    @property
    def inventory(self) -> Inventory:
        return self.scope.inventory

    @property
    def now(self) -> datetime:
        return self.scope.now

    @property
    def region(self) -> str:
        return self.scope.aws.region if self.scope.aws else "local"

    @property
    def host(self) -> Host:
        if self.scope.host is None:
            raise FmdoctorError(f"{self.check_id} needs the node itself: run it with fmdoctor check --local")
        return self.scope.host

    def client(self, service: str) -> Any:
        if self.scope.aws is None:
            raise FmdoctorError(f"{self.check_id} needs AWS access, which this on-node run does not have")
        return self.scope.aws.client(service)

    def shared(self, key: str, loader: Callable[[], T]) -> T:
        return self.scope.shared.get(key, loader)

    def unverified(self, unverified: str, code: str, message: str = "", iam_action: str | None = None) -> None:
        self.errors.append(
            CheckError(check=self.check_id, code=code, iam_action=iam_action, unverified=unverified, message=message)
        )

    @contextlib.contextmanager
    def guard(self, unverified: str) -> Iterator[None]:
        """Run one part of a check; an AWS failure there is recorded and the rest of the check goes on."""
        try:
            yield
        except Exception as exc:
            failure = describe_aws_failure(exc)
            if failure is None:
                raise
            self.unverified(unverified, failure.code, failure.message, failure.iam_action)
