"""GPU and EFA metrics from a Prometheus API: NVIDIA's DCGM exporter and the EFA node exporter, one query_range per
metric for the whole cluster.

DCGM exporter fields (NVIDIA/dcgm-exporter etc/default-counters.csv and etc/dcp-metrics-included.csv; the
SageMaker HyperPod observability "Exported metrics reference"), labelled ``gpu`` (index), ``UUID``,
``device``, ``modelName``, ``Hostname`` and, once scraped, ``instance``/``job``, plus Kubernetes
``pod``/``namespace``/``container`` where it runs there:

* ``DCGM_FI_DEV_GPU_UTIL`` (percent of time a kernel ran) is utilization; where only profiling metrics are
  published, ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a 0-1 ratio) stands in for it;
* ``DCGM_FI_DEV_FB_USED`` and ``FB_FREE`` (MiB): memory used, and total as their sum at the period's peak;
* ``DCGM_FI_DEV_POWER_USAGE`` (W), ``DCGM_FI_DEV_SM_CLOCK`` (MHz);
* ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` (0-1 ratio of cycles the tensor pipes were busy), as a percent;
* ``DCGM_FI_DEV_XID_ERRORS`` (a gauge: the value of the last Xid seen, 0 for none), each period's maximum;
* ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` (1 when row remapping failed: the GPU needs replacing).

``DCGM_FI_PROF_SM_ACTIVE`` is not read: tensor activity answers the question it would (is real math running).

The EFA exporter (aws-samples/awsome-distributed-training 4.validation_and_observability/3.efa-node-exporter,
node_exporter's ``amazonefa`` collector) publishes each RDMA device's sysfs hw_counters as counters named
``node_amazonefa_<counter>`` with ``device`` and ``port`` labels; an OpenTelemetry collector forwarding them
to AMP adds ``_total``, so both names are matched. Their increase over each period is summed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from fmdoctor.metrics.identity import NodeIndex
from fmdoctor.metrics.model import (
    EFA,
    MEMORY_TOTAL,
    MEMORY_USED,
    POWER,
    SM_CLOCK,
    TENSOR_ACTIVE,
    UTILIZATION,
    XID,
    EfaCounters,
    Point,
)
from fmdoctor.metrics.prometheus import Endpoint, PrometheusClient

MEMORY_FREE = "memory_free"
ROW_REMAP_FAILURE = "row_remap_failure"
UTILIZATION_METRIC = "DCGM_FI_DEV_GPU_UTIL"
ENGINE_ACTIVE_METRIC = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
# The labels that name a node, in the order they are trusted (see fmdoctor.metrics.identity).
ID_LABELS = ("InstanceId", "instance_id", "host_id")
NAME_LABELS = ("Hostname", "node", "kubernetes_node", "k8s_node_name", "nodename", "node_name", "host", "instance")


@dataclass(frozen=True)
class PromMetric:
    signal: str
    metric: str  # the name as published (a regex alternative for counters that may carry _total)
    function: str  # PromQL over each period: avg_over_time, max_over_time, min_over_time, increase
    scale: float = 1.0
    kind: str = "gpu"  # "gpu" (by node and gpu label) or EFA (by node and device)

    def query(self, period: timedelta) -> str:
        seconds = int(period.total_seconds())
        selector = (f'{{__name__=~"{self.metric}(_total)?"}}' if self.kind == EFA else self.metric)
        expression = f"{self.function}({selector}[{seconds}s])"
        return f"{expression} * {self.scale:g}" if self.scale != 1.0 else expression


GPU_METRICS = (
    PromMetric(UTILIZATION, UTILIZATION_METRIC, "avg_over_time"),
    PromMetric(MEMORY_USED, "DCGM_FI_DEV_FB_USED", "max_over_time"),
    PromMetric(MEMORY_FREE, "DCGM_FI_DEV_FB_FREE", "min_over_time"),
    PromMetric(POWER, "DCGM_FI_DEV_POWER_USAGE", "avg_over_time"),
    PromMetric(SM_CLOCK, "DCGM_FI_DEV_SM_CLOCK", "avg_over_time"),
    PromMetric(TENSOR_ACTIVE, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "avg_over_time", 100.0),
    PromMetric(XID, "DCGM_FI_DEV_XID_ERRORS", "max_over_time"),
    PromMetric(ROW_REMAP_FAILURE, "DCGM_FI_DEV_ROW_REMAP_FAILURE", "max_over_time"),
)
ENGINE_ACTIVE = PromMetric(UTILIZATION, ENGINE_ACTIVE_METRIC, "avg_over_time", 100.0)
# EFA exporter counters: the error counters judged, then RDMA throughput for evidence.
EFA_ERROR_COUNTERS = ("rx_drops", "rdma_read_wr_err", "rdma_write_wr_err")
EFA_THROUGHPUT_COUNTERS = ("rdma_read_bytes", "rdma_write_bytes")
EFA_METRICS = tuple(PromMetric(name, f"node_amazonefa_{name}", "increase", kind=EFA)
                    for name in (*EFA_ERROR_COUNTERS, *EFA_THROUGHPUT_COUNTERS))


@dataclass(frozen=True)
class PromResult:
    """What one sweep found: per (node, device) and signal the points, EFA totals, and what named no node."""

    points: dict[tuple[str, str], dict[str, list[Point]]]
    efa: dict[str, EfaCounters]
    unmatched: dict[str, tuple[str, ...]]
    queries: int
    published: frozenset[str]  # the metric names the source has


def sweep(client: PrometheusClient, index: NodeIndex, start: datetime, end: datetime, period: timedelta,
          with_efa: bool) -> PromResult:
    """One label-values call for the names that exist, then one query_range per metric present."""
    names = set(client.label_values("__name__", ['{__name__=~"DCGM_FI_.*|node_amazonefa_.*"}'], start, end))
    wanted = [m for m in GPU_METRICS if m.metric in names]
    if UTILIZATION_METRIC not in names and ENGINE_ACTIVE_METRIC in names:
        wanted.append(ENGINE_ACTIVE)
    if with_efa:
        wanted += [m for m in EFA_METRICS if m.metric in names or f"{m.metric}_total" in names]
    points: dict[tuple[str, str], dict[str, list[Point]]] = {}
    efa_totals: dict[tuple[str, str], dict[str, float]] = {}
    efa_points: Counter[tuple[str, str]] = Counter()
    unmatched: dict[str, dict[str, None]] = {}
    # Evaluated at the end of each period: every point covers (t - period, t], tiling the window.
    first = start + period
    for metric in wanted:
        for series in client.query_range(metric.query(period), first, end, period):
            resolved, identity = index.resolve_labels(series.labels, ID_LABELS, NAME_LABELS)
            if resolved.node is None:
                if not resolved.foreign:
                    unmatched.setdefault(f"prometheus/{metric.metric}", {})[identity or str(series.labels)] = None
                continue
            if metric.kind == EFA:
                key = (resolved.node, series.labels.get("device", ""))
                totals = efa_totals.setdefault(key, {})
                totals[metric.signal] = totals.get(metric.signal, 0.0) + sum(v for _, v in series.points)
                efa_points[key] = max(efa_points[key], len(series.points))
                continue
            device = series.labels.get("gpu") or series.labels.get("device", "")
            points.setdefault((resolved.node, device), {}).setdefault(metric.signal, []).extend(series.points)
    for by_signal in points.values():
        _memory_total(by_signal)
    efa = {f"{node}/{device}": EfaCounters(None, node, device or None, totals, efa_points[(node, device)])
           for (node, device), totals in efa_totals.items()}
    return PromResult(points, efa, {k: tuple(v) for k, v in unmatched.items()}, len(wanted) + 1,
                      frozenset(names))


def _memory_total(by_signal: dict[str, list[Point]]) -> None:
    """Total memory per period: used at its peak plus free at its low, which are the same instant."""
    free = dict(by_signal.pop(MEMORY_FREE, []))
    used = by_signal.get(MEMORY_USED, [])
    totals = [(t, v + free[t]) for t, v in used if t in free]
    if totals:
        by_signal[MEMORY_TOTAL] = totals


def empty_result() -> PromResult:
    return PromResult({}, {}, {}, 0, frozenset())


def describe_metric(endpoint: Endpoint) -> dict[str, str]:
    """Where a node's utilization came from, for evidence and runbooks."""
    return {"namespace": "prometheus", "metric": UTILIZATION_METRIC, "prometheus_url": endpoint.url,
            "prometheus_auth": endpoint.auth}

