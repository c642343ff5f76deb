"""What a check sees while it runs: target, settings, clients, the shared inventory and a shared cache."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from fmdoctor.config import ClusterSettings
from fmdoctor.engine import slots
from fmdoctor.engine.aws import ApiCallCounter, Aws
from fmdoctor.engine.errors import FmdoctorError, describe_aws_failure, note_failed_call
from fmdoctor.engine.host import Host
from fmdoctor.engine.inventory import Inventory, StagedInventory
from fmdoctor.engine.model import CheckError

T = TypeVar("T")


class SharedDataCycle(RuntimeError):
    """Loads that wait on one another (a loader asking, directly or through others, for its own key): each would
    wait for ever, so the one that closes the circle fails instead, and every asker reports it."""


class SharedData:
    """Per-run memo of futures: the first check to ask for a key starts its loader, every asker waits for it.

    The loader runs in a thread of its own (inline when the asker is itself a loader or holds no worker slot),
    so a check waiting for data holds no worker (fmdoctor.engine.slots) and two checks that need the same data
    wait for one load. :meth:`start` begins a load before anyone asks. Failures are memoised too, so a denied
    API is called once per run and every check that needed it reports the same error. Which thread runs each
    load and which key each thread waits for are kept, so a wait that would close a circle of loads raises
    :class:`SharedDataCycle` instead of hanging the run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Any]] = {}
        self._loading: dict[str, int] = {}  # key -> the thread running its loader
        self._waits: dict[int, str] = {}  # thread -> the key it waits for

    def start(self, key: str, loader: Callable[[], T]) -> Future[T]:
        """The future of ``key``, its loader started now in a thread of its own unless it was started before:
        data whose inputs exist is fetched while the caller goes on with other calls."""
        return self._start(key, loader, inline=False)

    def _start(self, key: str, loader: Callable[[], T], inline: bool) -> Future[T]:
        with self._lock:
            future = self._futures.get(key)
            if future is not None:
                return future
            future = self._futures[key] = Future()
        if inline:
            self._load(key, future, loader)
        else:
            threading.Thread(target=self._load, args=(key, future, loader), name=f"fmdoctor-load-{key[:40]}",
                             daemon=True).start()
        return future

    def get(self, key: str, loader: Callable[[], T]) -> T:
        # A check's thread hands the load to a thread of its own and gives its slot up while it waits; a loader
        # or a thread outside the runner's slots loads in place.
        inline = getattr(_in_loader, "active", False) or not slots.holds_slot()
        future = self._start(key, loader, inline)
        if not future.done():
            me = threading.get_ident()
            with self._lock:
                self._refuse_circle(key, me)
                self._waits[me] = key
            try:
                with slots.waiting():
                    future.exception()  # waits
            finally:
                with self._lock:
                    self._waits.pop(me, None)
        return future.result()

    def _refuse_circle(self, key: str, me: int) -> None:
        """Raise when waiting for ``key`` would wait for this thread itself: the thread loading ``key`` waits for
        a key whose loader waits ... for one this thread is loading (called with the lock held)."""
        chain, wanted = [key], key
        while (loader := self._loading.get(wanted)) is not None:
            if loader == me:
                raise SharedDataCycle("shared data that wait on one another: " + " -> ".join(chain))
            wanted = self._waits.get(loader)  # type: ignore[assignment]
            if wanted is None or wanted in chain:
                return
            chain.append(wanted)

    def _load(self, key: str, future: Future[Any], loader: Callable[[], Any]) -> None:
        nested = getattr(_in_loader, "active", False)
        _in_loader.active = True
        with self._lock:
            self._loading[key] = threading.get_ident()
        try:
            future.set_result(loader())
        except BaseException as exc:  # memoised and re-raised to every caller, named by the call that failed here
            note_failed_call(exc)
            future.set_exception(exc)
        finally:
            with self._lock:
                self._loading.pop(key, None)
            _in_loader.active = nested


_in_loader = threading.local()


@dataclass(frozen=True)
class RegionLoads:
    """The memo of loads whose answer is the same for every target in one account and region (``regional``
    EarlyLoads, fmdoctor.engine.prefetch), and the session they are made with: a fleet scan gives one to every
    run of a scope, so its clusters share DescribePlacementGroups, the FSx listing, a HyperPod cluster's nodes...
    instead of asking each again. The calls count on this session, not on any one cluster's."""

    aws: Aws
    shared: SharedData = field(default_factory=SharedData)

    def serves(self, aws: Aws | None) -> bool:
        """Whether a run on ``aws`` may read these loads: the same region and endpoint, and the same credentials
        (one access key: one principal of one account). A run of other credentials (a cluster whose settings name
        another profile) would judge its own resources by what another account or principal sees (its placement
        group of the same name, its HyperPod cluster), so it loads its own instead."""
        if aws is None:
            return False
        mine = self.aws
        return (aws.region == mine.region and aws.options.endpoint_url == mine.options.endpoint_url
                and _principal(aws) == _principal(mine) is not None)


def _principal(aws: Aws) -> str | None:
    """The access key a session signs with (resolved as its first call would; no request), None when it has
    none or cannot resolve one (that run's own calls then fail and say why)."""
    try:
        credentials = aws.session.get_credentials()
        return None if credentials is None else str(credentials.get_frozen_credentials().access_key)
    except Exception:
        return None


@dataclass(frozen=True)
class RunStart:
    """What a run has before its inventory: target, settings, clients, clock, the shared memo, the metric families
    its checks read. A load that needs nothing more (fmdoctor.engine.prefetch) starts from it while the inventory
    is read; one that needs the inventory's answer later waits for ``inventory``."""

    cluster: str
    settings: ClusterSettings
    aws: Aws | None
    now: datetime
    shared: SharedData
    host: Host | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    region_loads: RegionLoads | None = None  # loads shared with other runs in the account and region (fleet)
    metrics: frozenset[str] | None = None  # the metric families the run's checks read (RunScope.metrics)
    # The inventory's first part (instances and their details; not the endpoint chain) once read, or its failure:
    # a load that starts before it and is told by it later (the metric listings: which nodes are ours) waits here.
    inventory: Future[Inventory] | None = None

    @property
    def region(self) -> str:
        return self.aws.region if self.aws else "local"

    @property
    def node(self) -> Host:
        if self.host is None:
            raise FmdoctorError("this load needs the node itself: run it with fmdoctor check --local")
        return self.host

    def client(self, service: str) -> Any:
        if self.aws is None:
            raise FmdoctorError("this load needs AWS access, which this on-node run does not have")
        return self.aws.client(service)


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
    # Parts of the inventory still arriving (Doctor.check): ``inventory`` is then the first stage until
    # :meth:`settle` makes it the whole.
    staged: StagedInventory | None = None

    region_loads: RegionLoads | None = None

    @property
    def start(self) -> RunStart:
        return RunStart(self.cluster, self.settings, self.aws, self.now, self.shared, self.host, self.extras,
                        self.region_loads)

    def inventory_for(self, parts: frozenset[str]) -> Inventory:
        return self.inventory if self.staged is None else self.staged.for_parts(parts)

    def settle(self) -> None:
        """Make ``inventory`` the whole (every check has ended); raises what the later parts' discovery raised."""
        if self.staged is not None:
            self.inventory = self.staged.whole()


@dataclass
class CheckContext:
    """One check's view of the run; partial failures it records are reported under its id."""

    scope: RunScope
    check_id: str
    errors: list[CheckError] = field(default_factory=list)
    # The inventory this check reads: the parts it declares (Check.inventory); the scope's when not given.
    view: Inventory | None = None

    @property
    def cluster(self) -> str:
        return self.scope.cluster

    @property
    def settings(self) -> ClusterSettings:
        return self.scope.settings

    @property
    def inventory(self) -> Inventory:
        return self.scope.inventory if self.view is None else self.view

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
