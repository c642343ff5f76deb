from __future__ import annotations

from fmdoctor.engine.check import ACCELERATOR_METRICS, Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import INSTANCE_GROUP, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import GPU, ClusterMetrics, NodeMetrics
from fmdoctor.metrics.series import missing_devices

from ._common import id_list, plural
from ._gpu import (
    IAM_ACTIONS,
    INVENTORY,
    PREFETCH,
    cluster_metrics,
    report_unseen,
    rounded,
    settled_accelerated,
    unit,
    utilization_metric,
    window_evidence,
)

JUDGED_ELSEWHERE = ["gpu-idle", "gpu-straggler", "gpu-memory-pressure"]


class GpuMetricsMissing(Check):
    """Every running GPU/Neuron node publishes utilization for all its accelerators under a name fmdoctor can
    match to it, covering at least gpu.min_coverage_percent of the window.

    A node without them (agent not installed, stopped, or configured without the nvidia_gpu section) is a
    node whose idleness, straggling and memory nobody can see; one that reports 7 of its 8 GPUs has usually
    lost one (Xid 79, fallen off the bus). Series are matched by every name the agents publish (the CloudWatch
    agent's InstanceId and host, per aws/amazon-cloudwatch-agent plugins/inputs/nvidia_smi; Container Insights'
    InstanceId and NodeName, per translator/translate/otel/exporter/awsemf/kubernetes.go), so when series exist
    under a hostname nothing maps (a Slurm node name) the finding says so instead of blaming the agent.
    """

    id = "gpu-metrics-missing"
    family = "gpu"
    concerns = frozenset({NODE, INSTANCE_GROUP})
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS
    prefetch = PREFETCH
    inventory = INVENTORY
    metrics = frozenset({ACCELERATOR_METRICS})

    def run(self, ctx: CheckContext) -> list[Finding]:
        nodes = settled_accelerated(ctx)
        metrics = cluster_metrics(ctx)
        gpu = ctx.settings.gpu
        findings, failed = [], []
        for node in report_unseen(ctx, "GPU metrics", metrics, nodes):
            m = metrics.nodes[node.id]
            source = utilization_metric(m)
            namespace, metric = source["namespace"], source["metric"]
            label = node.label
            if m.failed_queries and not m.reporting:
                failed.append(label)
                continue
            strangers = unmatched_names(metrics, m)
            problem, summary = _problem(label, m, gpu.min_coverage_percent, f"{namespace}/{metric}", strangers,
                                        metrics.prometheus)
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
                        "source": m.source,
                        "listing": metrics.listings.get(f"{namespace}/{metric}", "namespace"),
                        "unmatched_series": list(strangers) if problem == "not-matched" else [],
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


UNMATCHED_SHOWN = 5


def unmatched_names(metrics: ClusterMetrics, m: NodeMetrics) -> tuple[str, ...]:
    """Names of series of this node's kind of metric that matched no node (a hostname nothing maps)."""
    found: dict[str, None] = {}
    for label, names in metrics.unmatched.items():
        if label.endswith(("_utilization_gpu", "gpu_utilization", "GPU_UTIL")) == (m.kind == GPU):
            found.update(dict.fromkeys(names))
    return tuple(found)


def _problem(label: str, m: NodeMetrics, min_coverage: float, metric: str, strangers: tuple[str, ...],
             prometheus: str | None) -> tuple[str | None, str]:
    what = unit(m.kind, m.expected_devices) if m.expected_devices else "accelerators"
    node_id = m.instance_id
    if not m.publishes and strangers:
        shown = ", ".join(strangers[:UNMATCHED_SHOWN]) + (" ..." if len(strangers) > UNMATCHED_SHOWN else "")
        fix = ("have the scraper add a label naming the node (its instance id, or Hostname as the node's "
               "private DNS name)" if m.source == "prometheus" else
               "add InstanceId to the CloudWatch agent's append_dimensions, or tag the instance with its hostname "
               "and list that tag key in gpu.hostname_tags")
        return "not-matched", (
            f"{label}: GPU metrics found but not matched to {node_id}: {len(strangers)} series name a host no "
            f"node of this cluster answers to ({shown}). If one is this node, {fix}; until then its idleness, "
            "straggling and memory could not be verified."
        )
    if not m.publishes:
        publisher = "DCGM exporter is not running there or not scraped" if m.source == "prometheus" else (
            "agent is not publishing GPU metrics")
        elsewhere = f" nor in {prometheus}" if prometheus and m.source == "cloudwatch" else ""
        return "no-series", (
            f"{label} publishes no {metric} (nor any other known GPU metric{elsewhere}) under a name that identifies "
            f"{node_id} (instance id, private DNS name, IP or hostname tag): its {publisher}, so its idleness, "
            "straggling and memory could not be verified."
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
