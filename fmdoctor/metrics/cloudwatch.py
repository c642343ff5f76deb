"""CloudWatch reads at cluster scale: discover the series that exist, then fetch them in as few calls as possible.

CloudWatch matches a metric's dimension set exactly, and the agent's dimensions depend on its configuration
(``index``, ``name``, ``host``, an appended ``InstanceId``...), so series are discovered with ListMetrics,
never guessed.

Listing cost, per metric name: listing the namespace (``RecentlyActive``, filtered here) costs
ceil(S / 500) calls for the S active series of that name in the account and region; listing one instance
at a time costs at least N calls for N nodes. The first is cheaper unless the account holds more than
500 active series of that name per node checked (8 per node for per-GPU metrics), so :func:`discover`
lists the namespace and switches to per-value listing only once its pages reach N, which bounds the total
at twice the cheaper of the two. Fetching packs up to 500 queries (GetMetricData's limit, fewer when the
100,800-datapoint limit binds) into each call: ceil(queries / per_call) calls for the whole cluster.

A listing pages one NextToken after another (500 series a page: 33 pages a metric name at 2,048 p4d nodes), so
fetching after the whole listing would add every GetMetricData round after every ListMetrics round. A
:class:`Sweep` takes queries as each page arrives (``discover``'s ``on_page``) and sends a batch as soon as it
holds ``per_call`` of them: the fetch of page 1 is in flight while page 2 is listed, and the run waits for the
listing plus about one GetMetricData round, with the same number of calls.

The listing itself is not skipped by guessing dimension sets from the inventory: the agent's set depends on
its configuration (``append_dimensions``, ``host``, ``name``...), CloudWatch answers a query of a wrong set
with no data, and no data must never read as an idle or healthy node; a listing also names the series of
hosts nothing maps (``Listing.unmatched``), which a guess cannot.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.engine.concurrency import all_at_once
from fmdoctor.engine.errors import note_failed_call
from fmdoctor.engine.responses import DECODED, CorruptResponse, check_response
from fmdoctor.engine.slots import waiting
from fmdoctor.engine.timestamps import parse_timestamp
from fmdoctor.metrics.model import Points

GET_METRIC_DATA_MAX_QUERIES = 500
GET_METRIC_DATA_MAX_DATAPOINTS = 100_800
# GetMetricData's quota is 50 requests a second per account and region; 10 in flight stays under it at
# CloudWatch's usual latency and leaves room for another run in the same account.
GET_METRIC_DATA_IN_FLIGHT = 10
# ListMetrics can only look back this far; a longer window lists every series ever seen (stale ones too).
RECENTLY_ACTIVE = timedelta(hours=3)


@dataclass(frozen=True, slots=True)
class Series:
    """One CloudWatch metric: namespace, name and its exact dimension set (sorted by name).

    Slotted: a 2,048-node listing holds 81,920 of them, and an instance dictionary is most of each one's size."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...] = ()
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # hashed once: a sweep keys its series in several maps (queued, owners, device keys), and a tuple of
        # dimension pairs is hashed anew at every lookup
        object.__setattr__(self, "_hash", hash((self.namespace, self.name, self.dimensions)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:  # a copy or another process hashes anew (str hashes are per process)
        return (Series, (self.namespace, self.name, self.dimensions))

    @classmethod
    def from_api(cls, raw: dict[str, Any], shared: dict[Any, Any] | None = None) -> Series:
        """The series a ListMetrics entry names; with ``shared`` (one per listing, or per run's listings), equal
        strings, dimension pairs and dimension sets are one object across its series: JSON decoding makes every
        occurrence anew, a listing repeats each node's pairs in all its series (16,384 series a metric name at
        2,048 p4d nodes), and each metric name repeats every dimension set."""
        if shared is None:
            dims = tuple(sorted((d["Name"], d.get("Value", "")) for d in raw.get("Dimensions", [])))
            return cls(raw["Namespace"], raw["MetricName"], dims)
        pairs = []
        for d in raw.get("Dimensions", []):
            pair = (d["Name"], d.get("Value", ""))
            pairs.append(shared.setdefault(pair, pair))
        namespace, name = raw["Namespace"], raw["MetricName"]
        dimensions = tuple(sorted(pairs))
        return cls(shared.setdefault(namespace, namespace), shared.setdefault(name, name),
                   shared.setdefault(dimensions, dimensions))

    def dim(self, name: str) -> str | None:
        return next((v for k, v in self.dimensions if k == name), None)

    @property
    def dimension_names(self) -> frozenset[str]:
        return frozenset(k for k, _ in self.dimensions)

    def to_api(self) -> dict[str, Any]:
        return {
            "Namespace": self.namespace,
            "MetricName": self.name,
            "Dimensions": [{"Name": k, "Value": v} for k, v in self.dimensions],
        }


OnPage = Callable[[list["Series"]], None]


@dataclass(frozen=True)
class Listing:
    """What :func:`discover` found for one metric name, and how (for evidence and call-count reasoning)."""

    series: tuple[Series, ...]
    mode: str  # "namespace" or "per-<dimension>"
    calls: int
    unmatched: tuple[str, ...] = ()  # identities of series that named no known node (see ``discover``)


def discover(
    cloudwatch: Any,
    namespace: str,
    metric: str,
    keep: Callable[[Series], bool],
    narrow_dimension: str | None = None,
    narrow_values: Sequence[str] = (),
    window: timedelta = timedelta(0),
    unmatched: Callable[[Series], str | None] | None = None,
    on_page: OnPage | None = None,
    shared: dict[Any, Any] | None = None,
    partitioning: Partitioning | None = None,
    owner: Callable[[Series], str | None] | None = None,
) -> Listing:
    """The series of ``metric`` that ``keep`` accepts.

    Lists the namespace first; if that takes as many pages as there are ``narrow_values`` and the series
    kept so far all carry ``narrow_dimension`` (so narrowing would lose none of their kind), it starts over
    with one listing per value. With ``partitioning`` (and ``owner``, the node a series belongs to), a deep
    listing is split by the GPU's dimension instead (see :func:`decide`). Duplicates (ListMetrics may repeat
    a series across pages) are dropped.
    ``unmatched`` names a rejected series whose node could not be told (a hostname nothing maps); those
    names are kept in the listing, so a node without series can be told apart from one nobody could match.
    ``on_page`` is handed each page's kept series as the page arrives (a :class:`Sweep` fetches them while
    the next page is listed); a series may be handed twice (a repeat across pages, a narrowed restart).
    ``shared`` is :meth:`Series.from_api`'s, for listings of several metric names: a node's series carry the
    same dimension set under every name (5 GPU metrics), so one tuple serves them all.
    """
    scope = ListingScope(owner or (lambda s: "" if keep(s) else None), narrow_dimension, tuple(narrow_values),
                         partitioning if owner is not None else None)
    run = ListingRun(cloudwatch, namespace, metric, window, shared, scope)
    return run.listing(keep, unmatched, on_page)


# A namespace listing is split into partitions only when the pages it still has to read, as the inventory
# estimates them, exceed this many. Below it the chain ends within 8 round trips (under a second at CloudWatch's
# usual 50-150 ms), while partitions cost up to one rounded-up page each more than the chain (G of them, 8 on
# every 8-GPU instance type) plus the namespace pages already read: at 64 and 256 p4d nodes (2 and 5 pages a
# metric name) the listing stays the one chain it was, call for call; at 2,048 (33 pages) it is split.
DEEP_PAGES = 8
PAGE_SIZE = 500  # ListMetrics' page (CloudWatch API reference, ListMetrics: "Up to 500 results are returned")
# Partitions of one metric name listed at once, each a NextToken chain of its own.
PARTITIONS_IN_FLIGHT = 8
# CloudWatch's quota on ListMetrics: 25 requests a second per account and Region (adjustable; CloudWatch User
# Guide, "CloudWatch service quotas", "Rate of ListMetrics requests"). Partitions only shorten a listing while the
# chains running stay under it: five GPU metric names listed side by side at CloudWatch's usual 100-200 ms a page
# already ask 25-50 a second, so splitting one of them would add calls (each partition rounds a page up) and
# throttling, not speed.
LIST_METRICS_RATE = 25.0


def split_within_quota(chains: int, partitions: int, seconds_a_page: float) -> bool:
    """Whether ``chains`` listings paging now (this one among them), with this one split into ``partitions``,
    would ask ListMetrics at most LIST_METRICS_RATE times a second, each chain sending a page every
    ``seconds_a_page`` (as this listing's pages have come)."""
    return (chains - 1 + partitions) <= LIST_METRICS_RATE * max(seconds_a_page, 0.0)


@dataclass(frozen=True)
class Partitioning:
    """How a deep listing of one GPU metric name may be split: one listing per value of the dimension that tells
    a node's GPUs apart (``index`` 0..G-1 for the CloudWatch agent's nvidia_smi_*), ``expected`` the series the
    nodes should have in all (the sum of their GPUs), from which the namespace chain's pages are estimated."""

    dimension: str
    values: tuple[str, ...]
    expected: int


@dataclass(frozen=True)
class ListingScope:
    """What deciding how to list needs from the inventory: the node each series belongs to (None: not ours), the
    dimension that names one node (``InstanceId``) and the nodes' values of it, and how to partition if deep."""

    owner: Callable[[Series], str | None]
    narrow_dimension: str | None = None
    narrow_values: tuple[str, ...] = ()
    partitioning: Partitioning | None = None


@dataclass
class Evidence:
    """What the namespace pages read so far show, for :func:`decide`."""

    total: int = 0  # series seen
    kept: int = 0  # series of our nodes
    narrowable: bool = True  # every kept series names its node by the narrow dimension
    partitionable: bool = True  # every series (ours or not) carries the partition dimension...
    values: set[str] = field(default_factory=set)  # ...with these values

    def add(self, series: Iterable[Series], scope: ListingScope) -> None:
        narrow = scope.narrow_dimension or ""
        split = scope.partitioning.dimension if scope.partitioning else ""
        for s in series:
            self.total += 1
            value = s.dim(split) if split else None
            if value is None:
                self.partitionable = False
            else:
                self.values.add(value)
            if scope.owner(s) is not None:
                self.kept += 1
                if s.dim(narrow) is None:
                    self.narrowable = False


def estimated_pages(series: int) -> int:
    return math.ceil(series / PAGE_SIZE)


def decide(scope: ListingScope, pages: int, more: bool, seen: Evidence) -> tuple[str, tuple[str, ...]] | None:
    """Whether a namespace listing that has read ``pages`` pages goes on (None), starts over with one listing per
    node (``("per-value", node values)``), or is split by the GPU dimension (``("partitions", values)``).

    * Per node, as before partitioning existed: once the chain has cost as many pages as there are nodes and
      every kept series names its node, listing per node bounds the total at twice the cheaper of the two.
    * Partitions only on evidence, never on a guess: the chain goes on (``more``), it has shown series of our
      nodes, every series it has shown carries the partition dimension (an ``aggregation_dimensions`` rollup or
      a host-only publisher has none, and a partition would never list it) and names its node (so a node the
      partitions miss can be listed on its own), and the pages still to read, estimated from the inventory,
      exceed DEEP_PAGES. The values are 0..G-1 and any other value already seen (an index beyond G).
    """
    if not more or seen.kept == 0:
        return None
    if scope.narrow_dimension and scope.narrow_values and pages >= len(scope.narrow_values) and seen.narrowable:
        return "per-value", scope.narrow_values
    split = scope.partitioning
    if (split is not None and seen.partitionable and seen.narrowable and scope.narrow_dimension
            and estimated_pages(split.expected) - pages > DEEP_PAGES):
        extra = sorted(seen.values - set(split.values), key=lambda v: (len(v), v))
        return "partitions", (*split.values, *extra)
    return None


# Before the inventory is read, a namespace listing is split only once its own pages prove it deep: this many read
# and more to come. A 256-node 8-GPU cluster (2,048 series a name) has 5 pages and so is never split this way; at
# 2,048 nodes (33 pages) the split comes after 6 pages instead of 33 (the pages read are read again by the
# partitions: 6 calls more a name). Once the inventory is read, :func:`decide` estimates the depth instead.
PROVEN_DEEP_PAGES = 6


def decide_before_inventory(pages: int, more: bool, seen: Evidence) -> tuple[str, tuple[str, ...]] | None:
    """Split a listing before its inventory is read, on its pages' evidence alone: PROVEN_DEEP_PAGES read and more
    to come, every series on them per GPU (the partition dimension) and naming its node (so a node the partitions
    miss can be listed on its own once the inventory says which are ours). The values are those seen; the
    inventory's G adds any missing (:meth:`ListingRun._list`)."""
    if not more or pages < PROVEN_DEEP_PAGES or not seen.partitionable or seen.kept == 0 or seen.kept != seen.total:
        return None
    return "partitions", tuple(sorted(seen.values, key=lambda v: (len(v), v)))


class _Stopped(Exception):
    """The run this listing was started for no longer needs it (its inventory failed, or names no such node)."""


_listing = threading.local()  # the ListingRun whose call this thread makes


def refuse_stopped_listing(**_: Any) -> None:
    """before-send for ListMetrics (each attempt, retries included): a stopped listing sends nothing more, so a
    call that is being retried when its run ends (an unreachable endpoint, throttling) ends at its next attempt
    instead of retrying behind the run's report."""
    run = getattr(_listing, "run", None)
    if run is not None and run.stopped:
        raise _Stopped(f"listing of {run.namespace}/{run.metric} stopped")


class ListingRun:
    """One metric name's ListMetrics, under way in a thread of its own from the moment it is made: its pages are
    kept as they arrive, and each consumer (:meth:`listing`) takes the pages already read, then the rest as they
    come, filtered by its own ``keep``.

    A namespace listing needs nothing from the inventory, so a run starts one before the inventory is read
    (``scope`` None); what needs the inventory, which nodes are ours and whether to narrow or partition
    (:func:`decide`), is given by :meth:`configure` once it is known, and applied at the next page. With ``split``
    (the publisher's GPU dimension and the node dimension, known from the settings) a listing whose own pages prove
    it deep is split before that (:func:`decide_before_inventory`), and completed once the inventory is read.

    Partitions: ListMetrics pages one NextToken after another, 500 series a page, so a metric name with 16,384
    series (2,048 p4d nodes x 8 GPUs) is 33 calls in a row. The CloudWatch agent's nvidia_smi input tags every GPU's
    fields with ``index`` (aws/amazon-cloudwatch-agent plugins/inputs/nvidia_smi/schema_v12/parser.go:
    ``"index": strconv.Itoa(i)``), and ListMetrics filters by a dimension's value (CloudWatch API reference,
    ListMetrics ``Dimensions``), so one listing per index value lists the same series in G chains of
    ceil(nodes / 500) pages side by side: 5 deep instead of 33 at 2,048 nodes, for about 1.2x the calls (each
    partition rounds up, and the namespace pages read before the split are read again). A node of ours that no
    partition listed (one publishing only a rollup without ``index``, or only an index beyond those listed) is
    then listed on its own by ``narrow_dimension``, so it is never read as having no metrics; more such nodes
    than the namespace has pages, and the whole namespace is listed again instead. A split is made only while the
    listings paging stay under ListMetrics' quota (:func:`split_within_quota`): past it, partitions add calls and
    throttling, not speed.
    """

    _chains = 0  # listings paging now, in this process (they share the account's ListMetrics quota)
    _chains_lock = threading.Lock()

    def __init__(self, cloudwatch: Any, namespace: str, metric: str, window: timedelta,
                 shared: dict[Any, Any] | None = None, scope: ListingScope | None = None,
                 split: tuple[str, str] | None = None):
        self.cloudwatch, self.namespace, self.metric = cloudwatch, namespace, metric
        self._base: dict[str, Any] = {"Namespace": namespace, "MetricName": metric}
        if window <= RECENTLY_ACTIVE:
            self._base["RecentlyActive"] = "PT3H"
        self._shared = {} if shared is None else shared
        self._cond = threading.Condition()
        self._pages: list[list[Series]] = []
        self._scope = scope
        # (partition dimension, node dimension) known before the inventory (the publisher's): with them a listing
        # proven deep by its own pages is split before the inventory is read (decide_before_inventory)
        self._split = None if split is None else ListingScope(
            lambda s, node=split[1]: s.dim(node), split[1], (), Partitioning(split[0], (), 0))
        self._stopped = False
        self._done = False
        self._failure: BaseException | None = None
        self.calls = 0
        self.mode = "namespace"
        _reader(cloudwatch)
        threading.Thread(target=self._run, name=f"fmdoctor-list-{metric[:40]}", daemon=True).start()

    @property
    def stopped(self) -> bool:
        return self._stopped

    def configure(self, scope: ListingScope) -> bool:
        """What the inventory says (the first scope given is kept: every asker derives it from the same inventory).
        False when the listing was stopped first: an asker then lists anew (checked here, in one step with the
        configuring, so a stop cannot come between an asker's look and its reading)."""
        with self._cond:
            if self._stopped:
                return False
            if self._scope is None:
                self._scope = scope
                self._cond.notify_all()
            return True

    def stop(self, unless_configured: bool = False) -> None:
        """No call after the one in flight: the run no longer needs this listing. ``unless_configured``: only if no
        asker has configured it yet (an asker reading it needs it, whatever the caller concluded)."""
        with self._cond:
            if unless_configured and self._scope is not None:
                return
            self._stopped = True
            self._cond.notify_all()

    def listing(self, keep: Callable[[Series], bool], unmatched: Callable[[Series], str | None] | None = None,
                on_page: OnPage | None = None) -> Listing:
        """The series ``keep`` accepts, each page's handed to ``on_page`` as it is read (or at once, for pages read
        before this was asked); waits, holding no check slot, until the listing ends, and raises its failure."""
        kept: dict[Series, None] = {}
        strangers: dict[str, None] = {}
        taken = 0
        with waiting():
            while True:
                with self._cond:
                    while taken == len(self._pages) and not self._done:
                        self._cond.wait()
                    batch = self._pages[taken:]
                    taken += len(batch)
                    finished = self._done and taken == len(self._pages)
                for page in batch:
                    fresh = []
                    for series in page:
                        if keep(series):
                            fresh.append(series)
                        elif unmatched is not None and (name := unmatched(series)):
                            strangers[name] = None
                    kept.update(dict.fromkeys(fresh))
                    if on_page is not None and fresh:
                        on_page(fresh)
                if finished:
                    break
        if self._failure is not None:
            raise self._failure
        return Listing(tuple(kept), self.mode, self.calls, tuple(strangers))

    @staticmethod
    @contextmanager
    def _paging() -> Iterator[None]:
        """One NextToken chain paging now, counted for the quota (:meth:`_quota_allows`): the namespace chain, and
        each partition or node listing on its own while it pages, so a split listing counts as the chains it runs
        (one count for the whole listing let five names each split into 8 and ask 40 a second under a rule of 25)."""
        with ListingRun._chains_lock:
            ListingRun._chains += 1
        try:
            yield
        finally:
            with ListingRun._chains_lock:
                ListingRun._chains -= 1

    def _run(self) -> None:
        _listing.run = self
        try:
            self._list()
        except BaseException as exc:  # handed to every consumer, named by the call that failed
            note_failed_call(exc)
            with self._cond:
                self._failure = self._failure or exc  # a partition's own failure, not the others' stop it caused
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _quota_allows(self, partitions: int, began: float) -> bool:
        """A split into ``partitions`` keeps the process's listings under ListMetrics' quota (split_within_quota),
        at the pace this listing's own pages have come."""
        seconds_a_page = (time.monotonic() - began) / max(self.calls, 1)
        with ListingRun._chains_lock:
            chains = ListingRun._chains
        return split_within_quota(chains, partitions, seconds_a_page)

    def _add(self, page: dict[str, Any]) -> list[Series]:
        series = [Series.from_api(raw, self._shared) for raw in page.get("Metrics", [])]
        with self._cond:
            self.calls += 1
            self._pages.append(series)
            self._cond.notify_all()
            if self._stopped or self._failure is not None:
                raise _Stopped(f"listing of {self.namespace}/{self.metric} stopped")
        return series

    def _list(self) -> None:
        seen = Evidence()
        judged = 0  # pages taken into ``seen``
        blind = Evidence()  # before the inventory: what the pages show with no node known
        decision = None
        began = time.monotonic()
        with self._paging():
            for page in self.cloudwatch.get_paginator("list_metrics").paginate(**self._base):
                self._add(page)
                more = bool(page.get("NextToken"))
                scope = self._scope
                if scope is None:
                    if self._split is not None:
                        blind.add(self._pages[-1], self._split)
                        decision = decide_before_inventory(self.calls, more, blind)
                else:
                    for series in self._pages[judged:]:
                        seen.add(series, scope)
                    judged = len(self._pages)
                    decision = decide(scope, self.calls, more, seen)
                if decision is not None and decision[0] == "partitions" and not self._quota_allows(
                        len(decision[1]), began):
                    decision = None  # the chains already ask as fast as the quota lets them: the chain goes on
                if decision is not None:
                    break
        if decision is None:
            return
        how, values = decision
        if how == "per-value":
            scope = self._scope
            assert scope is not None
            self.mode = f"per-{scope.narrow_dimension}"
            for value in values:  # one after another, as before (each a page or two)
                self._list_where(scope.narrow_dimension or "", value)
            return
        dimension = (self._scope.partitioning.dimension if self._scope is not None and self._scope.partitioning
                     else self._split.partitioning.dimension if self._split and self._split.partitioning else "")
        self.mode = f"per-{dimension}"
        all_at_once(lambda value: self._list_where(dimension, value), list(values), PARTITIONS_IN_FLIGHT,
                    "fmdoctor-list-partitions")
        with self._cond:  # split before the inventory was read: what it says completes the partitions
            while self._scope is None and not self._stopped:
                self._cond.wait()
            if self._stopped:
                raise _Stopped(f"listing of {self.namespace}/{self.metric} stopped")
            scope = self._scope
        assert scope is not None
        late = [v for v in (scope.partitioning.values if scope.partitioning else ()) if v not in values]
        if late:  # GPU indices of the nodes' instance types that the pages read before had not shown
            all_at_once(lambda value: self._list_where(dimension, value), late, PARTITIONS_IN_FLIGHT,
                        "fmdoctor-list-partitions")
        if not scope.narrow_dimension:
            return
        found = {scope.owner(s) for page in self._pages for s in page}
        missing = [v for v in scope.narrow_values if v not in found]
        expected = scope.partitioning.expected if scope.partitioning else 0
        if len(missing) > estimated_pages(expected):  # cheaper to read the namespace again
            with self._paging():
                for page in self.cloudwatch.get_paginator("list_metrics").paginate(**self._base):
                    self._add(page)
        elif missing:
            all_at_once(lambda value: self._list_where(scope.narrow_dimension or "", value), missing,
                        PARTITIONS_IN_FLIGHT, "fmdoctor-list-nodes")

    def _list_where(self, dimension: str, value: str) -> None:
        _listing.run = self  # a partition's thread
        try:
            with self._paging():
                for page in self.cloudwatch.get_paginator("list_metrics").paginate(
                        **self._base, Dimensions=[{"Name": dimension, "Value": value}]):
                    self._add(page)
        except _Stopped:
            raise
        except BaseException as exc:  # the listings beside this one stop at their next page
            note_failed_call(exc)
            with self._cond:
                self._failure = self._failure or exc
            raise


@dataclass(frozen=True, slots=True)
class Query:
    series: Series
    stat: str  # "Average", "Maximum", "Sum", ...


@dataclass
class Fetched:
    """Per query index: the values by period (ascending), and the queries CloudWatch could not answer."""

    values: dict[int, Points] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    calls: int = 0


def queries_per_call(start: datetime, end: datetime, period: timedelta) -> int:
    # One period more than the window holds: a window not aligned to the period spans an extra bucket.
    periods = math.ceil((end - start) / period) + 1
    return max(1, min(GET_METRIC_DATA_MAX_QUERIES, GET_METRIC_DATA_MAX_DATAPOINTS // periods))


def fetch(cloudwatch: Any, queries: Sequence[Query], start: datetime, end: datetime, period: timedelta) -> Fetched:
    """Every query's per-period values in ceil(len(queries) / per_call) GetMetricData calls (plus any pages),
    the batches in flight together (see :class:`Sweep`)."""
    sweep = Sweep(cloudwatch, start, end, period)
    sweep.add(queries)
    return sweep.close()


class Sweep:
    """GetMetricData for queries that arrive over time: a batch is sent as soon as ``per_call`` queries wait,
    the rest when the sweep is closed, so the calls are ceil(queries / per_call) whatever order the queries
    come in, and the first batches are answered while later queries are still being listed.

    The batches need nothing from one another, so up to GET_METRIC_DATA_IN_FLIGHT are in flight together
    (threads that hold no check slot). Query ``i`` of the sweep (in the order added) is ``i`` in the
    :class:`Fetched` that :meth:`close` returns. After a failed batch no batch not yet started is sent, and
    :meth:`close` raises the first failure once every batch started has ended."""

    def __init__(self, cloudwatch: Any, start: datetime, end: datetime, period: timedelta):
        self.cloudwatch, self.start, self.end = cloudwatch, start, end
        self.per_call = queries_per_call(start, end, period)
        self.seconds = int(period.total_seconds())
        self._lock = threading.Lock()
        # queries not yet sent, as added: the request's dictionaries (about 2 KB a query) are made by the batch's
        # own thread as it is sent, so batches waiting for a free thread hold 50 bytes a query, not 2 KB
        self._waiting: list[Query] = []
        self._count = 0
        self._batches: list[Future[Fetched]] = []
        self._failure: BaseException | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._grids: dict[tuple[datetime, ...], tuple[datetime, ...]] = {}  # each distinct series of period starts
        _reader(cloudwatch)

    def add(self, queries: Iterable[Query]) -> range:
        """Queue ``queries``; their indices in the result. Full batches are sent at once."""
        with self._lock:
            first = self._count
            for q in queries:
                self._waiting.append(q)
                self._count += 1
                if len(self._waiting) >= self.per_call:
                    self._send()
            return range(first, self._count)

    def close(self) -> Fetched:
        """Send what is left, wait for every batch and collect their values (each series' points by time)."""
        with self._lock:
            if self._waiting:
                self._send()
            batches, self._batches = self._batches, []
        result = Fetched()
        try:
            if len(batches) > 1 or (batches and not batches[0].done()):
                with waiting():  # a check's worker slot is free while GetMetricData is in flight
                    wait(batches)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        if self._failure is not None:
            raise self._failure
        pending = deque(batches)
        del batches
        while pending:  # each batch's part taken in, in order, and let go of
            part = pending.popleft().result()
            result.calls += part.calls
            result.values.update(part.values)  # a query is in one batch only: its pages were joined there
            result.failed.update(part.failed)
        return result

    def cancel(self) -> None:
        """Send nothing more (the run failed before the sweep was closed) and wait for the batches in flight, so the
        failure is reported once every call it started has ended (as :func:`~fmdoctor.engine.concurrency.
        each_at_once` does), with no GetMetricData still running behind the report."""
        with self._lock:
            self._waiting = []
            self._failure = self._failure or RuntimeError("GetMetricData sweep cancelled")
            pool = self._pool
        if pool is not None:  # outside the lock: a failing batch takes it to record its failure
            with waiting():
                pool.shutdown(wait=True, cancel_futures=True)

    def _send(self) -> None:
        batch, self._waiting = self._waiting, []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=GET_METRIC_DATA_IN_FLIGHT,
                                            thread_name_prefix="fmdoctor-metric-data")
        self._batches.append(self._pool.submit(self._call, self._count - len(batch), batch))

    def _call(self, first: int, batch: list[Query]) -> Fetched:
        """One batch's values (its queries ``first``, ``first`` + 1...), each page taken in as it is read: the pages'
        dictionaries and lists are let go of here, so a sweep holds its values once (a 2,048-node sweep's answers
        are 82,000 results)."""
        part = Fetched()
        if self._failure is not None:  # a batch failed before this one started: it is not sent
            return part
        try:
            requests = [{"Id": f"q{first + n}",
                         "MetricStat": {"Metric": q.series.to_api(), "Period": self.seconds, "Stat": q.stat},
                         "ReturnData": True} for n, q in enumerate(batch)]
            pages = self.cloudwatch.get_paginator("get_metric_data").paginate(
                MetricDataQueries=requests, StartTime=self.start, EndTime=self.end, ScanBy="TimestampAscending")
            found: dict[int, tuple[list[datetime], list[float]]] = {}
            for page in pages:
                part.calls += 1
                _collect(page.get("MetricDataResults", []), part, found)
            for index, (times, values) in found.items():  # a query's pages are all read: its points, by time
                part.values[index] = _points(times, values, self._grids)
            return part
        except BaseException as exc:  # named by the call that failed, for the thread that reports it
            note_failed_call(exc)
            with self._lock:
                self._failure = self._failure or exc
            raise


_READER_ID = "fmdoctor-metric-data"
_LISTING_READER_ID = "fmdoctor-list-metrics"
_LISTING_STOP_ID = "fmdoctor-list-metrics-stop"
_HOLD_ID = "fmdoctor-metric-data-queries"
_WRITER_ID = "fmdoctor-metric-data-request"
_HELD = "fmdoctor.metric_data_queries"  # the request context's key for the queries held out of serialization


def hold_metric_data_queries(params: dict[str, Any], context: dict[str, Any] | None = None,
                             **_: Any) -> dict[str, Any] | None:
    """provide-client-params for GetMetricData in the JSON protocol: take the queries out of what botocore's
    serializer walks, into the call's context, for :func:`write_metric_data_queries` to put in its body.

    botocore serializes a request by walking the model for every member (a 2,048-node sweep sends 82,000
    queries of six levels each: the largest CPU cost of the run once the answers were read with ``json.loads``);
    the queries are built here already in the wire's shape (strings, an integer period, a boolean), which
    ``json.dumps`` writes as the serializer would. StartTime, EndTime and the token are still botocore's."""
    queries = params.get("MetricDataQueries")
    if context is None or not isinstance(queries, list) or not queries:
        return None
    context[_HELD] = queries
    return {**params, "MetricDataQueries": []}


def write_metric_data_queries(params: dict[str, Any], context: dict[str, Any] | None = None, **_: Any) -> None:
    """before-call for GetMetricData: the held queries into the serialized JSON body (before signing, so the
    signature covers them)."""
    queries = (context or {}).pop(_HELD, None)
    if queries is None:
        return
    body = json.loads(params["body"])
    body["MetricDataQueries"] = queries
    params["body"] = json.dumps(body, separators=(",", ":")).encode()


def read_metric_data(response_dict: dict[str, Any], customized_response_dict: dict[str, Any],
                     operation_model: Any = None, **_: Any) -> None:
    """before-parse for GetMetricData in the JSON protocol: read the page with ``json.loads`` and leave botocore
    only its token and messages to parse.

    botocore's parser walks the model for every value (a 2,048-node sweep answers 2.5 million timestamps and
    values) and makes a datetime per timestamp; the series of one sweep share a few dozen period starts, so
    here each distinct timestamp becomes one datetime, shared. The body is proven whole first, as every answer
    is (fmdoctor.engine.responses); other protocols (CBOR, query) are parsed by botocore as usual."""
    raw = _json_page(response_dict, operation_model, "cloudwatch.GetMetricData")
    if raw is None:
        return
    instants: dict[float, datetime] = {}
    results = raw.pop("MetricDataResults", None)
    for result in results or ():
        if "Timestamps" in result:  # a member absent stays absent, as botocore leaves it
            stamps = []
            for value in result["Timestamps"] or ():
                instant = instants.get(value)
                if instant is None:
                    instant = instants[value] = parse_timestamp(value)
                stamps.append(instant)
            result["Timestamps"] = stamps
        if "Values" in result:
            result["Values"] = [float(v) for v in result["Values"] or ()]
    if results is not None:
        customized_response_dict["MetricDataResults"] = results
    _leave(response_dict, raw)


def read_list_metrics(response_dict: dict[str, Any], customized_response_dict: dict[str, Any],
                      operation_model: Any = None, **_: Any) -> None:
    """before-parse for ListMetrics in the JSON protocol: its metrics are strings only (namespace, name,
    dimension names and values), already in botocore's shape once ``json.loads`` has read them, so botocore's
    model walk (16,384 series a metric name at 2,048 p4d nodes) is left only the token to parse."""
    raw = _json_page(response_dict, operation_model, "cloudwatch.ListMetrics")
    if raw is None:
        return
    metrics = raw.pop("Metrics", None) or []
    if not isinstance(metrics, list):
        raise CorruptResponse(operation="cloudwatch.ListMetrics", problem="Metrics that is not a list")
    customized_response_dict["Metrics"] = metrics
    _leave(response_dict, raw)


def _json_page(response_dict: dict[str, Any], operation_model: Any, operation: str) -> dict[str, Any] | None:
    """A successful JSON answer's body, proven whole and read; None for anything botocore should parse."""
    if response_dict.get("status_code") != 200:
        return None
    headers = response_dict.get("headers") or {}
    body = response_dict.get("body")
    kind = str(headers.get("content-type") or headers.get("Content-Type") or "")
    if "json" not in kind or not isinstance(body, bytes | bytearray) or not body:
        return None
    held = response_dict.pop(DECODED, None)  # proven whole and decoded by the session's check_response
    if (held is None or held[0] is not body) and operation_model is not None:
        check_response(operation_model, response_dict)  # a client made elsewhere: proven here
        held = response_dict.pop(DECODED, None)
    if held is not None and held[0] is body:
        return held[1]  # type: ignore[no-any-return]
    try:
        raw = json.loads(body)
    except ValueError as exc:
        raise CorruptResponse(operation=operation, problem=f"JSON that does not parse: {exc}") from None
    return raw if isinstance(raw, dict) else None


def _leave(response_dict: dict[str, Any], raw: dict[str, Any]) -> None:
    """What botocore still parses: the page without the part read here, with a Content-Length that says so."""
    headers = response_dict.get("headers") or {}
    response_dict["body"] = json.dumps(raw).encode()
    for key in [k for k in list(headers) if k.lower() == "content-length"]:
        headers[key] = str(len(response_dict["body"]))


def _reader(cloudwatch: Any) -> None:
    """The readers of GetMetricData and ListMetrics answers on ``cloudwatch``, and GetMetricData's request writer
    where the client speaks the JSON protocol (each registered once per client)."""
    meta = getattr(cloudwatch, "meta", None)
    events = getattr(meta, "events", None)
    if events is None:
        return
    events.register("before-parse.cloudwatch.GetMetricData", read_metric_data, unique_id=_READER_ID)
    events.register("before-parse.cloudwatch.ListMetrics", read_list_metrics, unique_id=_LISTING_READER_ID)
    events.register("before-send.cloudwatch.ListMetrics", refuse_stopped_listing, unique_id=_LISTING_STOP_ID)
    model = getattr(meta, "service_model", None)
    if (getattr(model, "resolved_protocol", None) or getattr(model, "protocol", None)) == "json":
        events.register("provide-client-params.cloudwatch.GetMetricData", hold_metric_data_queries,
                        unique_id=_HOLD_ID)
        events.register("before-call.cloudwatch.GetMetricData", write_metric_data_queries, unique_id=_WRITER_ID)


def _collect(results: Iterable[dict[str, Any]], into: Fetched,
             found: dict[int, tuple[list[datetime], list[float]]]) -> None:
    """One page's results: failures into ``into``, each answered query's times and values onto ``found``'s."""
    for raw in results:
        index = int(raw["Id"][1:])
        status = raw.get("StatusCode", "Complete")
        if status in {"InternalError", "Forbidden"}:
            into.failed[index] = status
            continue
        stamps, values = raw.get("Timestamps", []), raw.get("Values", [])
        if len(stamps) != len(values):
            raise ValueError(f"GetMetricData answered {len(stamps)} timestamps and {len(values)} values "
                             f"for {raw['Id']}")
        times, floats = found.setdefault(index, ([], []))
        times.extend(stamps)
        floats.extend(map(float, values))


def _points(times: list[datetime], values: list[float], grids: dict[tuple[datetime, ...], tuple[datetime, ...]]
            ) -> Points:
    """A query's points sorted as (time, value) pairs, its times the sweep's one tuple of that grid."""
    if any(a >= b for a, b in zip(times, times[1:], strict=False)):  # out of order, or a time twice: sorted as pairs
        pairs = sorted(zip(times, values, strict=True))
        times, values = [t for t, _ in pairs], [v for _, v in pairs]
    grid = tuple(times)
    return Points(grids.setdefault(grid, grid), values)


def lower_bound_calls(query_count: int, start: datetime, end: datetime, period: timedelta) -> int:
    """The fewest GetMetricData calls any client needs for these queries (pages aside)."""
    return math.ceil(query_count / queries_per_call(start, end, period)) if query_count else 0
