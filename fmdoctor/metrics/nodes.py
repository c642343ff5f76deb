"""The one way accelerator metrics of EC2 nodes are found: ListMetrics per metric name, then one query per series.

Shared by the training cluster's snapshot (:mod:`fmdoctor.metrics.cluster`) and the inference fleet's signals
(:mod:`fmdoctor.inference.signals`), so both read whatever dimension set the CloudWatch agent, Container
Insights or neuron-monitor publishes (per GPU, per instance, ``host`` only...) instead of guessing one.
Each metric name is listed once however many statistics are asked of it; the caller fetches the plan's
queries in one batched sweep.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fmdoctor.config import ClusterSettings, GpuSettings
from fmdoctor.engine.check import ACCELERATOR_METRICS, EFA_METRICS
from fmdoctor.engine.concurrency import all_at_once
from fmdoctor.engine.inventory import COMPUTE, INFERENCE, Instance, InstanceTypeInfo, Inventory
from fmdoctor.metrics.cloudwatch import (
    Listing,
    ListingRun,
    ListingScope,
    OnPage,
    Partitioning,
    Query,
    Series,
    Sweep,
    discover,
)
from fmdoctor.metrics.identity import NodeIdentity
from fmdoctor.metrics.model import EFA, GPU, NEURON
from fmdoctor.metrics.series import NodeResolver, instance_identity, select_series

__all__ = ["EFA", "GPU", "NEURON"]
# Every metric name is listed at once (5 GPU names, 8 EFA counters): ListMetrics allows 25 requests a second.
LISTING_IN_FLIGHT = 16
# A listing for this spec, or None to discover one here; the OnPage is handed the pages of a listing it makes.
Lister = Callable[["MetricSpec", "OnPage | None"], "Listing | None"]


@dataclass(frozen=True)
class Publisher:
    """Where one agent puts NVIDIA GPU metrics in CloudWatch: its namespace, its name for each role, and the
    dimension that tells one GPU of a node from another with the value it gives GPU ``i`` (a deep listing is
    partitioned by it: :class:`~fmdoctor.metrics.cloudwatch.ListingRun`)."""

    name: str
    namespace: str
    metrics: tuple[tuple[str, str], ...]  # (role, metric name)
    device_dimension: str | None = None
    device_value: str = "{}"  # GPU i's value of device_dimension, formatted with i

    def metric(self, role: str) -> str | None:
        return next((m for r, m in self.metrics if r == role), None)


# The CloudWatch agent's nvidia_gpu section (measurement names nvidia_smi_<field>, from its nvidia_smi input:
# aws/amazon-cloudwatch-agent plugins/inputs/nvidia_smi) and Container Insights' DCGM-based node_gpu_* metrics
# (translator/translate/otel/exporter/awsemf/kubernetes.go): memory in MiB and in bytes, judged as a share.
CLOUDWATCH_AGENT = Publisher("CloudWatch agent", "CWAgent", (
    ("utilization", "nvidia_smi_utilization_gpu"), ("memory_used", "nvidia_smi_memory_used"),
    ("memory_total", "nvidia_smi_memory_total"), ("power", "nvidia_smi_power_draw"),
    ("sm_clock", "nvidia_smi_clocks_current_sm")), "index")
# The agent tags GPU i with index=i (plugins/inputs/nvidia_smi/schema_v12/parser.go: "index": strconv.Itoa(i));
# Container Insights names it GpuDevice=nvidia<i> beside per-node and per-cluster rollups that carry no GpuDevice
# (awsemf/kubernetes.go), so its namespace pages show series without it and its listings are never partitioned.
CONTAINER_INSIGHTS = Publisher("Container Insights", "ContainerInsights", (
    ("utilization", "node_gpu_utilization"), ("memory_used", "node_gpu_memory_used"),
    ("memory_total", "node_gpu_memory_total"), ("power", "node_gpu_power_draw")), "GpuDevice", "nvidia{}")
BUILT_IN_PUBLISHERS = (CLOUDWATCH_AGENT, CONTAINER_INSIGHTS)


def gpu_publisher(gpu: GpuSettings) -> Publisher:
    """The configured GPU metrics; power and SM clock default to those of the built-in publisher they name."""
    same = next((p for p in BUILT_IN_PUBLISHERS if (p.namespace, p.metric("utilization"))
                 == (gpu.namespace, gpu.utilization_metric)), None)
    power = gpu.power_metric or (same.metric("power") if same else None)
    clock = gpu.sm_clock_metric or (same.metric("sm_clock") if same else None)
    roles = [("utilization", gpu.utilization_metric), ("memory_used", gpu.memory_used_metric),
             ("memory_total", gpu.memory_total_metric), ("power", power), ("sm_clock", clock)]
    return Publisher(same.name if same else "configured", gpu.namespace,
                     tuple((role, name) for role, name in roles if name))


def other_publishers(gpu: GpuSettings) -> list[Publisher]:
    """The built-in publishers other than the configured one, where gpu.other_publishers allows."""
    if not gpu.other_publishers:
        return []
    mine = (gpu.namespace, gpu.utilization_metric)
    return [p for p in BUILT_IN_PUBLISHERS if (p.namespace, p.metric("utilization")) != mine]


@dataclass(frozen=True)
class MetricSpec:
    """One statistic of one metric, and what it is for (``role``) on which kind of target."""

    kind: str  # GPU, NEURON or EFA
    role: str  # "utilization", "memory_used", ... or an EFA counter name
    namespace: str
    metric: str
    stat: str

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.metric}"


@dataclass(frozen=True)
class QueryPlan:
    """The queries of one sweep and, for each (same index), which spec, owner and device it answers for."""

    specs: tuple[MetricSpec, ...]
    keys: tuple[tuple[int, str, str], ...]  # (spec index, owner, device)
    queries: tuple[Query, ...]
    listings: dict[str, Listing]  # by spec label
    indices: tuple[int, ...] = ()  # with a sweep: each query's index in it (same order as ``queries``)

    @property
    def list_calls(self) -> int:
        return sum(listing.calls for listing in self.listings.values())


def kind_of(info: InstanceTypeInfo) -> str | None:
    return GPU if info.gpus else NEURON if info.neuron_devices else None


def accelerator_specs(gpu: GpuSettings, kinds: set[str], stats: dict[str, tuple[str, ...]],
                      publisher: Publisher | None = None) -> list[MetricSpec]:
    """The GPU/Neuron specs for the kinds present; ``stats`` maps a role to its statistics (a role with
    several, e.g. Average and Maximum, is still listed once). GPU metrics are ``publisher``'s (default: the
    configured ones)."""
    metrics: list[tuple[str, str, str, str | None]] = []
    if GPU in kinds:
        chosen = publisher or gpu_publisher(gpu)
        metrics += [(GPU, role, chosen.namespace, name) for role, name in chosen.metrics]
    if NEURON in kinds:
        with_memory = bool(gpu.neuron_memory_used_metric and gpu.neuron_memory_total_metric)
        metrics += [(NEURON, role, gpu.neuron_namespace, name) for role, name in (
            ("utilization", gpu.neuron_utilization_metric),
            ("memory_used", gpu.neuron_memory_used_metric if with_memory else None),
            ("memory_total", gpu.neuron_memory_total_metric if with_memory else None))]
    return [MetricSpec(kind, role, namespace, name, stat)
            for kind, role, namespace, name in metrics if name for stat in stats.get(role, ())]


class NodeOwners:
    """Which accelerated node (of the right kind) a series belongs to, and how to narrow a listing to them."""

    def __init__(self, nodes: Iterable[Instance | NodeIdentity], kinds: dict[str, str | None], gpu: GpuSettings):
        self.nodes = list(nodes)
        self.kinds = kinds
        self.dimension = gpu.instance_dimension
        self.resolver = NodeResolver.shared(self.nodes, gpu.instance_dimension, gpu.host_dimension)

    def owner(self, spec: MetricSpec, series: Series) -> str | None:
        instance_id = self.resolver.instance_of(series)
        return instance_id if instance_id and self.kinds.get(instance_id) == spec.kind else None

    def unmatched(self, series: Series) -> str | None:
        """The name a series gives its node when that names no node known, neither ours nor another's."""
        resolved, identity = self.resolver.classify(series)
        return None if resolved.recognised else identity

    def narrow(self, spec: MetricSpec) -> tuple[str, list[str]]:
        return self.dimension, [n.id for n in self.nodes if self.kinds.get(n.id) == spec.kind]


def fleet_identities(inventory: Inventory, nodes: Iterable[Instance], gpu: GpuSettings) -> list[NodeIdentity]:
    return [instance_identity(n, inventory, gpu.hostname_tags) for n in nodes]


def plan_queries(
    cloudwatch: Any,
    specs: Sequence[MetricSpec],
    owner: Callable[[MetricSpec, Series], str | None],
    narrow: Callable[[MetricSpec], tuple[str, list[str]]],
    device_dimensions: Callable[[MetricSpec], Sequence[str]],
    window: timedelta,
    lister: Lister | None = None,
    unmatched: Callable[[Series], str | None] | None = None,
    sweep: Sweep | None = None,
    runs: Callable[[MetricSpec], ListingRun] | None = None,
) -> QueryPlan:
    """List every distinct metric of ``specs`` once (concurrently), then one query per owned series and stat.

    ``lister`` may hand over a listing made for the whole run (see :func:`shared_lister`); series in it that
    ``owner`` does not claim are left out. ``unmatched`` is passed to :func:`discover`. ``runs`` hands over the
    run's :class:`ListingRun` of a spec the lister does not list (started before the inventory, see
    :func:`start_listings`), read here as :func:`discover` would list it.

    With a ``sweep``, every owned series is queued on it as its listing page arrives, so GetMetricData runs
    while the listing goes on; the plan's ``indices`` say where each chosen query's values will be. Which of
    a node's dimension sets is chosen (:func:`select_series`) is known only once its listing ends, so a node
    that publishes under two sets has the other set's series fetched too, and set aside.
    """
    firsts: dict[tuple[str, str, str], MetricSpec] = {}
    for spec in specs:
        firsts.setdefault((spec.kind, spec.namespace, spec.metric), spec)
    sharing = {key: [(n, spec) for n, spec in enumerate(specs) if (spec.kind, spec.namespace, spec.metric) == key]
               for key in firsts}
    queued: dict[int, dict[Series, int]] = {n: {} for n in range(len(specs))}  # spec index -> series -> in sweep
    shared: dict[Any, Any] = {}  # the listings' equal strings, pairs and dimension sets (Series.from_api)
    lock = threading.Lock()

    def queue(key: tuple[str, str, str], series: Iterable[Series]) -> None:
        assert sweep is not None
        with lock:
            fresh = [(n, s, spec) for s in series for n, spec in sharing[key]
                     if s not in queued[n] and owner(spec, s) is not None]
            for (n, s, _), index in zip(fresh, sweep.add(Query(s, spec.stat) for _, s, spec in fresh), strict=True):
                queued[n][s] = index

    def list_one(key: tuple[str, str, str]) -> Listing:
        spec = firsts[key]
        on_page = (lambda page: queue(key, page)) if sweep is not None else None
        listing = lister(spec, on_page) if lister else None
        if listing is None:
            dimension, values = narrow(spec)
            run = runs(spec) if runs is not None else None
            if run is not None and run.configure(ListingScope(lambda s: owner(spec, s), dimension, tuple(values))):
                listing = run.listing(lambda s: owner(spec, s) is not None, unmatched, on_page)
            else:
                listing = discover(cloudwatch, spec.namespace, spec.metric, lambda s: owner(spec, s) is not None,
                                   dimension, values, window, unmatched, on_page, shared)
        if sweep is not None:
            queue(key, listing.series)  # a listing made elsewhere (shared) or pages not handed over
        return listing

    try:
        found = dict(zip(firsts, all_at_once(list_one, list(firsts), LISTING_IN_FLIGHT, "fmdoctor-metrics"),
                         strict=True))
    except BaseException:
        if sweep is not None:
            sweep.cancel()
        raise

    keys: list[tuple[int, str, str]] = []
    queries: list[Query] = []
    indices: list[int] = []
    for n, spec in enumerate(specs):
        by_owner: dict[str, list[Series]] = {}
        for s in found[(spec.kind, spec.namespace, spec.metric)].series:
            who = owner(spec, s)
            if who:
                by_owner.setdefault(who, []).append(s)
        for who, series in sorted(by_owner.items()):
            for device, members in select_series(series, device_dimensions(spec)).items():
                for s in members:
                    keys.append((n, who, device))
                    queries.append(Query(s, spec.stat))
                    if sweep is not None:
                        indices.append(queued[n][s])
    listings = {first.label: found[key] for key, first in firsts.items()}
    return QueryPlan(tuple(specs), tuple(keys), tuple(queries), listings, tuple(indices))


def efa_interfaces(inventory: Inventory) -> dict[str, str]:
    """Every EFA interface (ENI) of a running compute instance -> that instance: the ones whose counters are read."""
    return {e.id: i.id for i in inventory.compute_nodes() if i.state == "running"
            for e in inventory.interfaces_of(i) if e.is_efa}


def listing_key(spec: MetricSpec) -> str:
    """The run's one listing of a metric name (SharedData key), whoever starts or reads it."""
    return f"cloudwatch.listing:{spec.label}"


def _device_dimension(spec: MetricSpec) -> Publisher | None:
    """The built-in publisher of ``spec``'s GPU metric name, when it names a dimension per GPU."""
    publisher = next((p for p in BUILT_IN_PUBLISHERS if p.namespace == spec.namespace
                      and spec.metric in dict(p.metrics).values()), None)
    return publisher if spec.kind == GPU and publisher is not None and publisher.device_dimension else None


def partitioning(spec: MetricSpec, infos: Iterable[InstanceTypeInfo]) -> Partitioning | None:
    """How a deep listing of ``spec``'s name may be split: by its built-in publisher's GPU dimension, over the
    most GPUs any of the nodes' instance types has (``infos``: one per node)."""
    publisher = _device_dimension(spec)
    counts = [info.gpus for info in infos]
    if publisher is None or publisher.device_dimension is None or not counts or max(counts) < 1:
        return None
    values = tuple(publisher.device_value.format(n) for n in range(max(counts)))
    return Partitioning(publisher.device_dimension, values, sum(counts))


class ListingScopes:
    """What the run's listings need from its inventory (:class:`ListingScope`), one per metric name: the GPU/Neuron
    nodes of the target, training and inference alike (see :func:`shared_lister`), and the EFA interfaces."""

    def __init__(self, inventory: Inventory, settings: ClusterSettings):
        nodes = [i for i in inventory.instances
                 if (i.role == COMPUTE and i.state == "running") or i.role == INFERENCE]
        self.types = {i.id: inventory.type_of(i) for i in nodes}
        self.kinds = {i.id: kind_of(info) for i, info in zip(nodes, self.types.values(), strict=True)}
        self.owners = NodeOwners(fleet_identities(inventory, [i for i in nodes if self.kinds[i.id]], settings.gpu),
                                 self.kinds, settings.gpu)
        self.efa = efa_interfaces(inventory)
        self.efa_dimension = settings.gpu.efa_interface_dimension

    def scope(self, spec: MetricSpec) -> ListingScope | None:
        """The listing's scope, or None where the target has nothing it could find (no node of the kind)."""
        if spec.kind == EFA:
            if not self.efa:
                return None
            efa = self.efa
            dimension = self.efa_dimension
            return ListingScope(lambda s: eni if (eni := s.dim(dimension)) in efa else None, dimension,
                                tuple(sorted(efa)))
        dimension, values = self.owners.narrow(spec)
        if not values:
            return None
        return ListingScope(lambda s: self.owners.owner(spec, s), dimension, tuple(values),
                            partitioning(spec, [self.types[v] for v in values]))


def listing_scopes(inventory: Inventory, settings: ClusterSettings,
                   memo: Callable[[str, Callable[[], Any]], Any]) -> ListingScopes:
    return memo("cloudwatch.listing-scopes", lambda: ListingScopes(inventory, settings))  # type: ignore[no-any-return]


def accelerator_window(settings: ClusterSettings) -> timedelta:
    return max(settings.gpu.window, settings.inference.window)


def shared_lister(cloudwatch: Any, inventory: Inventory, settings: ClusterSettings,
                  memo: Callable[[str, Callable[[], Any]], Any]) -> Lister:
    """GPU/Neuron listings made once per run for every accelerated node of the target, training and inference
    alike, so a cluster with both lists each metric name once (``memo`` is the run's shared memo). A listing
    :func:`start_listings` began before the inventory is taken over; each asker reads its pages (those already
    read at once, the rest as they arrive)."""
    scopes = listing_scopes(inventory, settings, memo)
    window = accelerator_window(settings)

    def lister(spec: MetricSpec, on_page: OnPage | None = None) -> Listing | None:
        if spec.kind == EFA:
            return None
        scope = scopes.scope(spec)
        if scope is None:  # no node of the kind: nothing to find (and nothing started for it, see start_listings)
            scope = ListingScope(lambda s: scopes.owners.owner(spec, s))
        run = memo(listing_key(spec), lambda: ListingRun(cloudwatch, spec.namespace, spec.metric, window,
                                                         _strings(memo), scope))
        if not run.configure(scope):  # begun before the inventory and stopped by it: listed anew for this asker
            run = ListingRun(cloudwatch, spec.namespace, spec.metric, window, _strings(memo), scope)
        return run.listing(lambda s: scope.owner(s) is not None, scopes.owners.unmatched, on_page)  # type: ignore[no-any-return]

    return lister


def run_listings(cloudwatch: Any, window: timedelta, memo: Callable[[str, Callable[[], Any]], Any]
                 ) -> Callable[[MetricSpec], ListingRun]:
    """The run's listing of a spec that :func:`shared_lister` does not list (the EFA counters): the one
    :func:`start_listings` began, or one begun now."""
    def run(spec: MetricSpec) -> ListingRun:
        found: ListingRun = memo(listing_key(spec), lambda: ListingRun(cloudwatch, spec.namespace, spec.metric,
                                                                        window, _strings(memo)))
        if found.stopped:
            return ListingRun(cloudwatch, spec.namespace, spec.metric, window, _strings(memo))
        return found

    return run


def _strings(memo: Callable[[str, Callable[[], Any]], Any]) -> dict[Any, Any]:
    """The run's listings' one table of equal strings and dimension sets (Series.from_api): a node's dimension set
    is one tuple under every metric name."""
    return memo("cloudwatch.listing-strings", dict)  # type: ignore[no-any-return]


def early_specs(settings: ClusterSettings, families: frozenset[str] | None) -> list[MetricSpec]:
    """The metric names a run lists whatever its inventory holds, by the families its checks read: the configured
    GPU publisher's (accelerators) and the EFA counters (efa). Neuron names and the other publishers' are listed
    once the inventory shows a node that needs them."""
    gpu = settings.gpu
    specs = []
    if families is None or ACCELERATOR_METRICS in families:
        specs += [MetricSpec(GPU, role, gpu.namespace, name, "") for role, name in gpu_publisher(gpu).metrics]
    if families is None or EFA_METRICS in families:
        specs += [MetricSpec(EFA, name, gpu.efa_namespace, name, "") for name in gpu.efa_metrics]
    return specs


def start_listings(cloudwatch: Any, settings: ClusterSettings, families: frozenset[str] | None,
                   inventory: Future[Inventory], memo: Callable[[str, Callable[[], Any]], Any]) -> list[ListingRun]:
    """Begin the run's CloudWatch namespace listings before its inventory is read: a namespace listing needs nothing
    from it, and at 2,048 nodes each name is a chain of pages that would otherwise only start after the inventory's
    own round trips. ``memo`` is the run's SharedData (get). Once ``inventory`` is read each
    listing is told which nodes are ours (and may narrow or partition); a name the inventory has no node for is
    stopped, and every listing stops when the inventory fails (a cancelled run's AWS client refuses their next call).
    """
    runs: list[tuple[MetricSpec, ListingRun]] = []
    strings = _strings(memo)
    for spec in early_specs(settings, families):
        window = settings.gpu.window if spec.kind == EFA else accelerator_window(settings)
        publisher = _device_dimension(spec)
        split = (publisher.device_dimension, settings.gpu.instance_dimension) if publisher else None
        run: ListingRun = memo(listing_key(spec), lambda spec=spec, window=window, split=split: ListingRun(
            cloudwatch, spec.namespace, spec.metric, window, strings, split=split))
        runs.append((spec, run))

    def read(done: Future[Inventory]) -> None:
        # A future's waiters wake before its callbacks run: a check may already have configured a listing (and be
        # reading it) when this runs, so a name this inventory has no node for stops only a listing nobody reads.
        # Whatever this callback fails on (its exception would only be logged by the future), every listing not
        # configured is stopped, never left waiting for a scope that will not come.
        try:
            if done.cancelled() or done.exception() is not None:
                for _, run in runs:
                    run.stop()
                return
            scopes = listing_scopes(done.result(), settings, memo)
            for spec, run in runs:
                scope = scopes.scope(spec)
                if scope is None:
                    run.stop(unless_configured=True)
                else:
                    run.configure(scope)
        except BaseException:
            for _, run in runs:
                run.stop(unless_configured=True)
            raise

    inventory.add_done_callback(read)
    return [run for _, run in runs]
