"""One CloudWatch snapshot of a cluster's accelerators and EFA links, fetched once per run for every check.

ListMetrics per metric name (see :mod:`fmdoctor.metrics.cloudwatch` for why), one GetMetricData sweep for
every series of every node (its batches sent as the listing pages arrive), then :mod:`fmdoctor.metrics.model`
data the checks judge without touching AWS.

A node with no series under the configured GPU metrics is looked for under the other publishers' names
(the CloudWatch agent's ``nvidia_smi_*``, Container Insights' ``node_gpu_*``): first their utilization only,
one ListMetrics each, and their other metrics only when that finds one of the missing nodes, so a cluster
whose nodes all publish pays nothing for it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fmdoctor.config import GpuSettings
from fmdoctor.engine.inventory import Inventory
from fmdoctor.metrics.cloudwatch import Fetched, ListingRun, Series, Sweep
from fmdoctor.metrics.model import (
    EFA,
    GPU,
    MEMORY_TOTAL,
    MEMORY_USED,
    UTILIZATION,
    ClusterMetrics,
    DeviceMetrics,
    EfaCounters,
    NodeMetrics,
    Point,
    Points,
    periods_in,
)
from fmdoctor.metrics.nodes import (
    Lister,
    MetricSpec,
    NodeOwners,
    Publisher,
    QueryPlan,
    accelerator_specs,
    gpu_publisher,
    kind_of,
    other_publishers,
    plan_queries,
)
from fmdoctor.metrics.targets import MetricNode, ec2_nodes

__all__ = ["GPU", "ClusterMetrics", "DeviceMetrics", "EfaCounters", "NodeMetrics", "kind_of",
           "load_cloudwatch", "load_cluster_metrics"]

SNAPSHOT_STATS = {UTILIZATION: ("Average",), MEMORY_USED: ("Maximum",), MEMORY_TOTAL: ("Maximum",),
                  "power": ("Average",), "sm_clock": ("Average",)}

# The agent's EFA counters carry device, port and eniId; ports of one device are summed.
EFA_DEVICE_DIMENSIONS = ("device",)


@dataclass(frozen=True, slots=True)
class _Entry:
    """One fetched series' place in the snapshot (one per series: slotted)."""

    spec: MetricSpec
    owner: str
    device: str
    index: int  # in the sweep's Fetched


def metric_specs(gpu: GpuSettings, kinds: set[str], with_efa: bool) -> list[MetricSpec]:
    """Utilization, power and clocks averaged per period; memory as the period's peak; EFA counters summed."""
    specs = accelerator_specs(gpu, kinds, SNAPSHOT_STATS)
    if with_efa:
        specs += [MetricSpec(EFA, name, gpu.efa_namespace, name, "Sum") for name in gpu.efa_metrics]
    return specs


def load_cluster_metrics(cloudwatch: Any, inventory: Inventory, gpu: GpuSettings, now: datetime,
                         lister: Lister | None = None) -> ClusterMetrics:
    """The snapshot of a cluster's running accelerated EC2 compute nodes and their EFA interfaces."""
    running = [i for i in inventory.instances if i.state == "running" and i.role == "compute"]
    efa_interfaces = {e.id: i.id for i in running for e in inventory.interfaces_of(i) if e.is_efa}
    return load_cloudwatch(cloudwatch, ec2_nodes(inventory, gpu.hostname_tags), efa_interfaces, gpu, now, lister)


def load_cloudwatch(cloudwatch: Any, nodes: Sequence[MetricNode], efa_interfaces: dict[str, str],
                    gpu: GpuSettings, now: datetime, lister: Lister | None = None,
                    accelerators: bool = True, runs: Callable[[MetricSpec], ListingRun] | None = None
                    ) -> ClusterMetrics:
    """The snapshot; without ``accelerators`` only the EFA counters are listed and fetched, and every node is
    left without GPU/Neuron series (for runs whose checks read none). ``runs`` hands over the run's listings of
    the names ``lister`` does not list (the EFA counters, begun before the inventory: nodes.start_listings)."""
    start, end = now - gpu.window, now
    kinds: dict[str, str | None] = {n.id: n.kind for n in nodes}
    owners = NodeOwners([n.identity for n in nodes], kinds, gpu)

    def owner(spec: MetricSpec, series: Series) -> str | None:
        if spec.kind == EFA:
            eni = series.dim(gpu.efa_interface_dimension)
            return eni if eni in efa_interfaces else None
        return owners.owner(spec, series)

    def narrow(spec: MetricSpec) -> tuple[str, list[str]]:
        return (gpu.efa_interface_dimension, sorted(efa_interfaces)) if spec.kind == EFA else owners.narrow(spec)

    def devices(spec: MetricSpec) -> Sequence[str]:
        return EFA_DEVICE_DIMENSIONS if spec.kind == EFA else gpu.device_dimensions

    specs = metric_specs(gpu, {n.kind for n in nodes} if accelerators else set(), bool(efa_interfaces))
    sweep = Sweep(cloudwatch, start, end, gpu.period)
    plan = plan_queries(cloudwatch, specs, owner, narrow, devices, gpu.window, lister, owners.unmatched, sweep, runs)
    entries = _entries(plan)
    unmatched = {label: listing.unmatched for label, listing in plan.listings.items() if listing.unmatched}
    listings = {label: listing.mode for label, listing in plan.listings.items()}
    del plan  # its keys and queries (one each per series) are not held while the sweep's answers arrive
    where = {n.id: _where(gpu_publisher(gpu) if n.kind == GPU else None, gpu) for n in nodes}
    missing = {n.id for n in nodes if n.kind == GPU and accelerators} - {e.owner for e in entries
                                                                          if e.spec.role == UTILIZATION}
    for publisher in other_publishers(gpu) if missing else []:
        found, strangers = _other_publisher(cloudwatch, publisher, missing, owners, devices, gpu, sweep)
        unmatched.update(strangers)
        entries += found
        for who in {e.owner for e in found}:
            where[who] = _where(publisher, gpu)
        missing -= {e.owner for e in found}
    fetched = sweep.close()
    return _assemble(entries, fetched, nodes, where, efa_interfaces, start, end, gpu, listings, unmatched)


def _entries(plan: QueryPlan) -> list[_Entry]:
    return [_Entry(plan.specs[n], who, device, index)
            for (n, who, device), index in zip(plan.keys, plan.indices, strict=True)]


def _where(publisher: Publisher | None, gpu: GpuSettings) -> dict[str, str]:
    if publisher is None:
        return {"namespace": gpu.neuron_namespace, "metric": gpu.neuron_utilization_metric}
    return {"namespace": publisher.namespace, "metric": publisher.metric(UTILIZATION) or ""}


def _other_publisher(cloudwatch: Any, publisher: Publisher, missing: set[str], owners: NodeOwners,
                     devices: Any, gpu: GpuSettings, sweep: Sweep
                     ) -> tuple[list[_Entry], dict[str, tuple[str, ...]]]:
    """The series of the ``missing`` nodes under another publisher's names (its utilization listed first), and
    the names of its series that matched no node."""
    def owner(spec: MetricSpec, series: Series) -> str | None:
        who = owners.owner(spec, series)
        return who if who in missing else None

    def narrow(spec: MetricSpec) -> tuple[str, list[str]]:
        return owners.dimension, sorted(missing)

    specs = accelerator_specs(gpu, {GPU}, SNAPSHOT_STATS, publisher)
    first = [s for s in specs if s.role == UTILIZATION]
    plan = plan_queries(cloudwatch, first, owner, narrow, devices, gpu.window, unmatched=owners.unmatched,
                        sweep=sweep)
    strangers = {label: listing.unmatched for label, listing in plan.listings.items() if listing.unmatched}
    entries = _entries(plan)
    seen = {e.owner for e in entries}
    if not seen:
        return [], strangers

    def seen_owner(spec: MetricSpec, series: Series) -> str | None:
        who = owner(spec, series)
        return who if who in seen else None

    rest = [s for s in specs if s.role != UTILIZATION]
    return entries + _entries(plan_queries(cloudwatch, rest, seen_owner, narrow, devices, gpu.window,
                                           sweep=sweep)), strangers


def _device_order(device: str) -> tuple[int, str]:
    return (int(device), "") if device.isdigit() else (1 << 30, device)


def _assemble(entries: list[_Entry], fetched: Fetched, nodes: Sequence[MetricNode], where: dict[str, dict[str, str]],
              efa_interfaces: dict[str, str], start: datetime, end: datetime, gpu: GpuSettings,
              listings: dict[str, str], unmatched: dict[str, tuple[str, ...]]) -> ClusterMetrics:
    # (node, device) -> role -> points: the sweep's own Points for a device's one series, a list for several
    points: dict[tuple[str, str], dict[str, Sequence[Point]]] = {}
    failed: Counter[str] = Counter()
    efa_totals: dict[str, dict[str, float]] = {}
    efa_points: Counter[str] = Counter()
    efa_device: dict[str, str] = {}
    for entry in entries:
        spec, who, device, index = entry.spec, entry.owner, entry.device, entry.index
        if index in fetched.failed:
            failed[who] += 1
            continue
        found = fetched.values.get(index, Points())
        if spec.kind == EFA:
            totals = efa_totals.setdefault(who, {})
            totals[spec.role] = totals.get(spec.role, 0.0) + sum(found.values)
            efa_points[who] = max(efa_points[who], len(found))
            efa_device.setdefault(who, device)
        else:
            by_role = points.setdefault((who, device), {})
            held = by_role.get(spec.role)
            by_role[spec.role] = found if held is None else [*held, *found]  # a second series: merged by period
    periods = periods_in(start, end, gpu.period)
    grouped = points_by_node(points)
    metrics = {n.id: node_metrics(n, grouped.get(n.id, {}), periods, failed[n.id], "cloudwatch", where[n.id])
               for n in nodes}
    efa = {
        eni: EfaCounters(eni, efa_interfaces[eni], efa_device.get(eni) or None, totals, efa_points[eni])
        for eni, totals in efa_totals.items()
    }
    return ClusterMetrics(start, end, gpu.period, metrics, efa_interfaces, efa, listings, len(entries), unmatched)


def points_by_node(points: Mapping[tuple[str, str], Mapping[str, Sequence[Point]]]
                   ) -> dict[str, dict[tuple[str, str], Mapping[str, Sequence[Point]]]]:
    """``points`` split by node, in their order: each node's :func:`node_metrics` then reads its own devices
    instead of sorting and scanning every device of the cluster (2,048 nodes x 16,384 devices)."""
    grouped: dict[str, dict[tuple[str, str], Mapping[str, Sequence[Point]]]] = {}
    for key, by_role in points.items():
        grouped.setdefault(key[0], {})[key] = by_role
    return grouped


def node_metrics(node: MetricNode, points: Mapping[tuple[str, str], Mapping[str, Sequence[Point]]], periods: int,
                 failed: int, source: str, where: dict[str, str]) -> NodeMetrics:
    """One node's devices from its per-(device, signal) points (any others', from :func:`points_by_node`, are
    passed over); a device is one that reports utilization."""
    devices = []
    for (who, device), by_role in sorted(points.items(), key=lambda item: _device_order(item[0][1])):
        if who != node.id or not by_role.get(UTILIZATION):
            continue
        signals = {role: _per_period(found, max if role in {MEMORY_USED, MEMORY_TOTAL} else None)
                   for role, found in by_role.items()}
        peaks = {role: max(_values(signals.get(role, ())), default=None) for role in (MEMORY_USED, MEMORY_TOTAL)}
        used = signals[UTILIZATION]
        devices.append(DeviceMetrics(
            device=device,
            utilization=tuple(_values(used)),
            memory_used=peaks[MEMORY_USED],
            memory_total=peaks[MEMORY_TOTAL],
            last_seen=max(used.times) if isinstance(used, Points) else max(t for t, _ in used),
            signals=signals,
        ))
    return NodeMetrics(instance_id=node.id, kind=node.kind, expected_devices=node.expected_devices, periods=periods,
                       devices=tuple(devices), per_device=any(d.device for d in devices), failed_queries=failed,
                       source=source, where=where)


def _values(points: Sequence[Point]) -> Iterable[float]:
    return points.values if isinstance(points, Points) else (v for _, v in points)


def _per_period(found: Sequence[Point], combine: Any = None) -> Sequence[Point]:
    """Points sorted by time; two series of one device (a renamed host) answering the same period are merged:
    the larger for a peak, else their mean. A sweep's :class:`Points` of one series is kept as it is."""
    if isinstance(found, Points):
        times, values = found.times, found.values
        if all(a < b for a, b in zip(times, times[1:], strict=False)):
            if combine or all(v or math.copysign(1.0, v) > 0 for v in values):
                return found
            return Points(times, [v + 0.0 for v in values])
        found = list(found)
    if all(found[i][0] < found[i + 1][0] for i in range(len(found) - 1)):
        # one series (the usual case): sorted, one value a period, its own peak and its own mean (fsum makes a -0.0
        # mean 0.0: only then are new points made; the others are shared with the fetch, not copied)
        if combine or all(v or math.copysign(1.0, v) > 0 for _, v in found):
            return tuple(found)
        return tuple((t, v + 0.0) for t, v in found)
    by_time: dict[datetime, list[float]] = {}
    for t, v in found:
        by_time.setdefault(t, []).append(v)
    return tuple((t, combine(vs) if combine else math.fsum(vs) / len(vs)) for t, vs in sorted(by_time.items()))
