"""The metric layer's answer: per node and device, what each signal did over the window, from any source.

Plain frozen data the GPU, Neuron and EFA checks judge without touching AWS or Prometheus. A source
(CloudWatch, Prometheus) fills it; the checks never know which one did, except to cite it in evidence.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, overload

from fmdoctor.engine.errors import AwsFailure
from fmdoctor.metrics import percent

GPU = "gpu"
NEURON = "neuron"
EFA = "efa"

# The signals a source may answer for a device, each one value per period (ascending in time).
UTILIZATION = "utilization"  # percent of time a kernel ran (nvidia-smi, DCGM_FI_DEV_GPU_UTIL)
MEMORY_USED = "memory_used"  # the period's peak (any unit: judged as a share of MEMORY_TOTAL)
MEMORY_TOTAL = "memory_total"
POWER = "power"  # watts, the period's mean
SM_CLOCK = "sm_clock"  # MHz, the period's mean
TENSOR_ACTIVE = "tensor_active"  # percent of cycles the tensor pipes were busy (DCGM profiling)
SM_ACTIVE = "sm_active"  # percent of cycles an SM had a warp resident (DCGM profiling)
XID = "xid"  # the last Xid code in the period (DCGM_FI_DEV_XID_ERRORS), 0 for none

Point = tuple[datetime, float]


class Points(Sequence[Point]):
    """One series' points, read as a sequence of ``(time, value)`` tuples (equal to a tuple or list of them), stored
    as the period starts (one tuple, shared by every series of a sweep on the same grid) and the values as doubles.

    A 2,048-node p4d snapshot holds 81,920 series of 5-7 periods: as tuples of tuples of a datetime and a float,
    about 540 bytes a series; stored so, about 150."""

    __slots__ = ("times", "values")

    def __init__(self, times: tuple[datetime, ...] = (), values: Iterable[float] = ()):
        self.times = times
        self.values = values if isinstance(values, array) else array("d", values)
        if len(self.values) != len(times):
            raise ValueError(f"{len(times)} times for {len(self.values)} values")

    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, index: int) -> Point: ...

    @overload
    def __getitem__(self, index: slice) -> Points: ...

    def __getitem__(self, index: int | slice) -> Point | Points:
        if isinstance(index, slice):
            return Points(self.times[index], self.values[index])
        return self.times[index], self.values[index]

    def __iter__(self) -> Iterator[Point]:
        return zip(self.times, self.values, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Points):
            return self.times == other.times and self.values == other.values
        if isinstance(other, tuple | list):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:  # as the tuple of its points, which it equals
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Points({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Points, (self.times, self.values))


@dataclass(frozen=True)
class DeviceMetrics:
    """One GPU or NeuronCore over the window."""

    device: str
    utilization: tuple[float, ...] = ()
    memory_used: float | None = None  # peak over the window
    memory_total: float | None = None
    last_seen: datetime | None = None
    signals: Mapping[str, Sequence[Point]] = field(default_factory=dict)  # a tuple, or Points (CloudWatch's)

    @property
    def mean_utilization(self) -> float | None:
        return sum(self.utilization) / len(self.utilization) if self.utilization else None

    @property
    def memory_percent(self) -> float | None:
        return percent(self.memory_used, self.memory_total)

    def values(self, signal: str) -> list[float]:
        points = self.signals.get(signal, ())
        return points.values.tolist() if isinstance(points, Points) else [v for _, v in points]

    def mean(self, signal: str) -> float | None:
        values = self.values(signal)
        return sum(values) / len(values) if values else None

    def memory_percents(self) -> list[Point]:
        """Memory used per period as a share of the device's memory, where both are known."""
        total = self.memory_total
        if not total:
            return []
        return [(t, 100.0 * v / total) for t, v in self.signals.get(MEMORY_USED, ())]


@dataclass(frozen=True)
class NodeMetrics:
    instance_id: str
    kind: str  # GPU or NEURON
    expected_devices: int
    periods: int
    devices: tuple[DeviceMetrics, ...] = ()  # one per utilization series found (by device)
    per_device: bool = False  # the series tell devices apart (index, NeuronCore...)
    failed_queries: int = 0  # the source answered an error for these
    source: str = "cloudwatch"  # "cloudwatch" or "prometheus"
    where: Mapping[str, str] = field(default_factory=dict)  # where utilization was read, for evidence

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
        means = [m for m in (d.mean_utilization for d in self.reporting) if m is not None]
        return sum(means) / len(means) if means else None

    @property
    def last_seen(self) -> datetime | None:
        return max((d.last_seen for d in self.devices if d.last_seen), default=None)

    def mean(self, signal: str) -> float | None:
        """The mean over its devices of each device's mean, for devices that publish the signal."""
        means = [m for m in (d.mean(signal) for d in self.reporting) if m is not None]
        return sum(means) / len(means) if means else None

    def publishes_signal(self, signal: str) -> bool:
        return any(d.signals.get(signal) for d in self.reporting)


@dataclass(frozen=True)
class EfaCounters:
    """One EFA interface's counters summed over the window (CloudWatch agent deltas, or a Prometheus counter's
    increase). CloudWatch names the interface by ENI; the EFA exporter by node and RDMA device."""

    eni_id: str | None
    instance_id: str
    device: str | None
    totals: dict[str, float] = field(default_factory=dict)
    datapoints: int = 0

    @property
    def key(self) -> str:
        return self.eni_id or f"{self.instance_id}/{self.device}"


@dataclass(frozen=True)
class ClusterMetrics:
    start: datetime
    end: datetime
    period: timedelta
    nodes: dict[str, NodeMetrics]  # every judged accelerated node, with or without series
    efa_interfaces: dict[str, str]  # every EFA interface (ENI) of a running compute node -> its instance
    efa: dict[str, EfaCounters]  # the interfaces that publish counters, by EfaCounters.key
    listings: dict[str, str] = field(default_factory=dict)  # "namespace/metric" -> listing mode
    queries: int = 0  # queries of the sweep(s)
    # Per metric, identities of series that named no node this run knows (a hostname no tag maps...).
    unmatched: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unseen: dict[str, str] = field(default_factory=dict)  # nodes no source could be asked about -> what to set
    unreadable: dict[str, AwsFailure] = field(default_factory=dict)  # nodes whose source failed -> why
    # Nodes whose GPU series (starting) or EFA counters (efa_starting) would come from a Prometheus that holds less
    # than a judgeable share of the window (it started, or began receiving these series, inside it) -> why.
    starting: dict[str, str] = field(default_factory=dict)
    efa_starting: dict[str, str] = field(default_factory=dict)
    prometheus: str | None = None  # the Prometheus that completed CloudWatch's answer, if one did
    efa_counters: tuple[str, ...] = ()  # Prometheus EFA counters that count errors (the rest are throughput)


def periods_in(start: datetime, end: datetime, period: timedelta) -> int:
    return max(1, math.ceil((end - start) / period))
