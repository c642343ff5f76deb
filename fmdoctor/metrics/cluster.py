"""One CloudWatch snapshot of a cluster's accelerators and EFA links, fetched once per run for every check.

The GPU, Neuron and EFA checks all read :class:`ClusterMetrics`: ListMetrics per metric name (see
:mod:`fmdoctor.metrics.cloudwatch` for why), one GetMetricData sweep for every series of every node, then
plain frozen data the checks judge without touching AWS.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.config import GpuSettings
from fmdoctor.engine.inventory import COMPUTE, Instance, InstanceTypeInfo, Inventory
from fmdoctor.metrics import percent
from fmdoctor.metrics.cloudwatch import Series, fetch
from fmdoctor.metrics.nodes import (
    EFA,
    GPU,
    Lister,
    MetricSpec,
    NodeOwners,
    accelerator_specs,
    kind_of,
    plan_queries,
)

SNAPSHOT_STATS = {"utilization": ("Average",), "memory_used": ("Maximum",), "memory_total": ("Maximum",)}

# The agent's EFA counters carry device, port and eniId; ports of one device are summed.
EFA_DEVICE_DIMENSIONS = ("device",)


@dataclass(frozen=True)
class DeviceMetrics:
    """One GPU or NeuronCore over the window: utilization per period, peak memory used and total."""

    device: str
    utilization: tuple[float, ...] = ()
    memory_used: float | None = None
    memory_total: float | None = None
    last_seen: datetime | None = None

    @property
    def mean_utilization(self) -> float | None:
        return sum(self.utilization) / len(self.utilization) if self.utilization else None

    @property
    def memory_percent(self) -> float | None:
        return percent(self.memory_used, self.memory_total)


@dataclass(frozen=True)
class NodeMetrics:
    instance_id: str
    kind: str  # GPU or NEURON
    expected_devices: int
    periods: int
    devices: tuple[DeviceMetrics, ...] = ()  # one per utilization series found (by device)
    per_device: bool = False  # the series tell devices apart (index, NeuronCore...)
    failed_queries: int = 0  # CloudWatch answered InternalError/Forbidden for these

    @property
    def publishes(self) -> bool:
        return bool(self.devices)

    @property
    def reporting(self) -> list[DeviceMetrics]:
        return [d for d in self.devices if d.utilization]

    @property
    def datapoints(self) -> int:
        return max((len(d.utilization) for d in self.devices), default=0)

    @property
    def coverage(self) -> float:
        return min(1.0, self.datapoints / self.periods) if self.periods else 0.0

    @property
    def utilization(self) -> float | None:
        means = [d.mean_utilization for d in self.reporting]
        return sum(means) / len(means) if means else None  # type: ignore[arg-type]

    @property
    def last_seen(self) -> datetime | None:
        return max((d.last_seen for d in self.devices if d.last_seen), default=None)


@dataclass(frozen=True)
class EfaCounters:
    """One EFA interface's error counters summed over the window (the agent publishes them as deltas)."""

    eni_id: str
    instance_id: str
    device: str | None
    totals: dict[str, float] = field(default_factory=dict)
    datapoints: int = 0


@dataclass(frozen=True)
class ClusterMetrics:
    start: datetime
    end: datetime
    period: timedelta
    nodes: dict[str, NodeMetrics]  # every running accelerated compute node, with or without series
    efa_interfaces: dict[str, str]  # every EFA interface of a running compute node -> its instance
    efa: dict[str, EfaCounters]  # the interfaces that publish counters
    listings: dict[str, str] = field(default_factory=dict)  # "namespace/metric" -> listing mode
    queries: int = 0  # GetMetricData queries of the sweep


def expected_devices(info: InstanceTypeInfo) -> int:
    return info.gpus or info.neuron_cores  # neuron-monitor reports utilization per NeuronCore


def metric_specs(gpu: GpuSettings, kinds: set[str], with_efa: bool) -> list[MetricSpec]:
    """Utilization averaged per period; memory as the period's peak; EFA counters summed."""
    specs = accelerator_specs(gpu, kinds, SNAPSHOT_STATS)
    if with_efa:
        specs += [MetricSpec(EFA, name, gpu.efa_namespace, name, "Sum") for name in gpu.efa_metrics]
    return specs


def load_cluster_metrics(cloudwatch: Any, inventory: Inventory, gpu: GpuSettings, now: datetime,
                         lister: Lister | None = None) -> ClusterMetrics:
    start, end = now - gpu.window, now
    running = [i for i in inventory.instances if i.state == "running" and i.role == COMPUTE]
    kinds = {i.id: kind_of(inventory.type_of(i)) for i in running}
    accelerated = [i for i in running if kinds[i.id]]
    efa_interfaces = {e.id: i.id for i in running for e in inventory.interfaces_of(i) if e.is_efa}
    specs = metric_specs(gpu, {k for k in kinds.values() if k}, bool(efa_interfaces))
    nodes = NodeOwners(accelerated, kinds, gpu)

    def owner(spec: MetricSpec, series: Series) -> str | None:
        if spec.kind == EFA:
            eni = series.dim(gpu.efa_interface_dimension)
            return eni if eni in efa_interfaces else None
        return nodes.owner(spec, series)

    def narrow(spec: MetricSpec) -> tuple[str, list[str]]:
        return (gpu.efa_interface_dimension, sorted(efa_interfaces)) if spec.kind == EFA else nodes.narrow(spec)

    plan = plan_queries(cloudwatch, specs, owner, narrow,
                        lambda spec: EFA_DEVICE_DIMENSIONS if spec.kind == EFA else gpu.device_dimensions, gpu.window,
                        lister)
    fetched = fetch(cloudwatch, plan.queries, start, end, gpu.period)
    metrics = _assemble(specs, list(plan.keys), fetched, accelerated, kinds, inventory, efa_interfaces, start, end,
                        gpu)
    return ClusterMetrics(
        **metrics,
        listings={label: listing.mode for label, listing in plan.listings.items()},
        queries=len(plan.queries),
    )


def _device_order(device: str) -> tuple[int, str]:
    return (int(device), "") if device.isdigit() else (1 << 30, device)


def _assemble(
    specs: list[MetricSpec], keys: list[tuple[int, str, str]], fetched: Any, accelerated: list[Instance],
    kinds: dict[str, str | None], inventory: Inventory, efa_interfaces: dict[str, str],
    start: datetime, end: datetime, gpu: GpuSettings,
) -> dict[str, Any]:
    util: dict[str, dict[str, list[tuple[datetime, float]]]] = {}
    peaks: dict[tuple[str, str, str], float] = {}  # (role, instance, device) -> max
    failed: Counter[str] = Counter()
    efa_totals: dict[str, dict[str, float]] = {}
    efa_points: Counter[str] = Counter()
    efa_device: dict[str, str] = {}
    for index, (n, who, device) in enumerate(keys):
        spec = specs[n]
        if index in fetched.failed:
            failed[who] += 1
            continue
        points = fetched.values.get(index, [])
        if spec.kind == EFA:
            totals = efa_totals.setdefault(who, {})
            totals[spec.role] = totals.get(spec.role, 0.0) + sum(v for _, v in points)
            efa_points[who] = max(efa_points[who], len(points))
            efa_device.setdefault(who, device)
        elif spec.role == "utilization":
            util.setdefault(who, {}).setdefault(device, []).extend(points)
        elif points:
            key = (spec.role, who, device)
            peaks[key] = max(peaks.get(key, -math.inf), max(v for _, v in points))

    periods = max(1, math.ceil((end - start) / gpu.period))
    nodes = {}
    for instance in accelerated:
        info = inventory.type_of(instance)
        found = util.get(instance.id, {})
        devices = tuple(
            DeviceMetrics(
                device=device,
                utilization=tuple(v for _, v in sorted(points)),
                memory_used=peaks.get(("memory_used", instance.id, device)),
                memory_total=peaks.get(("memory_total", instance.id, device)),
                last_seen=max((t for t, _ in points), default=None),
            )
            for device, points in sorted(found.items(), key=lambda item: _device_order(item[0]))
        )
        nodes[instance.id] = NodeMetrics(
            instance_id=instance.id,
            kind=kinds[instance.id] or GPU,
            expected_devices=expected_devices(info),
            periods=periods,
            devices=devices,
            per_device=any(d.device for d in devices),
            failed_queries=failed[instance.id],
        )
    efa = {
        eni: EfaCounters(eni, efa_interfaces[eni], efa_device.get(eni) or None, totals, efa_points[eni])
        for eni, totals in efa_totals.items()
    }
    return {"start": start, "end": end, "period": gpu.period, "nodes": nodes, "efa_interfaces": efa_interfaces,
            "efa": efa}
