from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import NodeMetrics
from fmdoctor.metrics.series import missing_devices

from ._common import id_list, plural
from ._gpu import (
    IAM_ACTIONS,
    cluster_metrics,
    rounded,
    settled_accelerated,
    unit,
    utilization_metric,
    window_evidence,
)

JUDGED_ELSEWHERE = ["gpu-idle", "gpu-straggler", "gpu-memory-pressure"]


class GpuMetricsMissing(Check):
    """Every running GPU/Neuron node publishes utilization for all its accelerators to CloudWatch, covering
    at least gpu.min_coverage_percent of the window.

    A node without them (agent not installed, stopped, or configured without the nvidia_gpu section) is a
    node whose idleness, straggling and memory nobody can see; one that reports 7 of its 8 GPUs has usually
    lost one (Xid 79, fallen off the bus).
    """

    id = "gpu-metrics-missing"
    family = "gpu"
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS

    def run(self, ctx: CheckContext) -> list[Finding]:
        nodes = settled_accelerated(ctx)
        metrics = cluster_metrics(ctx)
        gpu = ctx.settings.gpu
        findings, failed = [], []
        for node in nodes:
            m = metrics.nodes[node.id]
            source = utilization_metric(ctx, m.kind)
            namespace, metric = source["namespace"], source["metric"]
            label = ctx.inventory.label(node.id)
            if m.failed_queries and not m.reporting:
                failed.append(label)
                continue
            problem, summary = _problem(label, m, gpu.min_coverage_percent, f"{namespace}/{metric}")
            if problem is None:
                continue
            findings.append(
                self.finding(
                    resource=node.id,
                    summary=summary,
                    evidence={
                        "instance": node.id,
                        "problem": problem,
                        **source,
                        "expected_devices": m.expected_devices,
                        "devices_reporting": len(m.reporting),
                        "missing_devices": missing_devices((d.device for d in m.reporting), m.expected_devices),
                        "datapoints": m.datapoints,
                        "periods": m.periods,
                        "coverage_percent": rounded(100 * m.coverage),
                        "last_datapoint": m.last_seen.isoformat(timespec="seconds") if m.last_seen else None,
                        "not_verified": JUDGED_ELSEWHERE if problem != "devices-missing" else [],
                        "listing": metrics.listings.get(f"{namespace}/{metric}", "namespace"),
                        "instance_type": node.instance_type,
                        **window_evidence(ctx, metrics),
                    },
                )
            )
        if failed:
            ctx.unverified(f"GPU metrics of {plural(len(failed), 'node')} ({id_list(failed)})", code="InternalError",
                           message="CloudWatch GetMetricData answered InternalError/Forbidden for their series",
                           iam_action="cloudwatch:GetMetricData")
        return findings


def _problem(label: str, m: NodeMetrics, min_coverage: float, metric: str) -> tuple[str | None, str]:
    what = unit(m.kind, m.expected_devices) if m.expected_devices else "accelerators"
    if not m.publishes:
        return "no-series", (
            f"{label} publishes no {metric} for its {what}: the CloudWatch agent is not running or not "
            "collecting GPU metrics there, so its idleness, straggling and memory could not be verified."
        )
    if 100 * m.coverage < min_coverage:
        return "sparse", (
            f"{label} published {metric} for only {m.datapoints} of the window's {m.periods} periods "
            f"({100 * m.coverage:.0f}%): its agent stopped or is failing, so its GPUs could not be judged."
        )
    if m.per_device and len(m.reporting) < m.expected_devices:
        missing = missing_devices((d.device for d in m.reporting), m.expected_devices)
        which = f" (missing {', '.join(missing)})" if missing else ""
        return "devices-missing", (
            f"{label} reports {metric} for {len(m.reporting)} of its {what}{which}: a device the driver no "
            "longer sees has usually fallen off the bus; check its Xid errors."
        )
    return None, ""
