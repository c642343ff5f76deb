"""What the GPU, Neuron and EFA-counter checks share: the run's CloudWatch snapshot, and which nodes it can judge."""

from __future__ import annotations

from dataclasses import dataclass

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.inventory import Instance
from fmdoctor.metrics.cluster import GPU, ClusterMetrics, NodeMetrics, kind_of, load_cluster_metrics
from fmdoctor.metrics.nodes import shared_lister

from ._common import id_list, plural

METRICS_KEY = "cloudwatch.cluster-metrics"
IAM_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "cloudwatch:ListMetrics",
               "cloudwatch:GetMetricData")
MISSING_CHECK = "gpu-metrics-missing"


def accelerated_running(ctx: CheckContext) -> list[Instance]:
    inv = ctx.inventory
    return [i for i in inv.accelerated_nodes() if i.state == "running" and kind_of(inv.type_of(i))]


def cluster_metrics(ctx: CheckContext) -> ClusterMetrics:
    """The run's one CloudWatch snapshot (ListMetrics + batched GetMetricData), shared by every check."""
    def load() -> ClusterMetrics:
        cloudwatch = ctx.client("cloudwatch")
        lister = shared_lister(cloudwatch, ctx.inventory, ctx.settings, ctx.shared)  # inference fleet too
        return load_cluster_metrics(cloudwatch, ctx.inventory, ctx.settings.gpu, ctx.now, lister)

    return ctx.shared(METRICS_KEY, load)


def settled(ctx: CheckContext, node: Instance) -> bool:
    """Launched long enough ago for its agent and job to be running (``gpu.startup_grace``)."""
    return node.launch_time is None or node.launch_time <= ctx.now - ctx.settings.gpu.startup_grace


def unit(kind: str, count: int = 1) -> str:
    return plural(count, "GPU") if kind == GPU else plural(count, "NeuronCore")


@dataclass(frozen=True)
class Judged:
    node: Instance
    metrics: NodeMetrics


def settled_accelerated(ctx: CheckContext) -> list[Instance]:
    """Running GPU/Neuron nodes old enough to judge; NotApplicable when there are none."""
    nodes = accelerated_running(ctx)
    if not nodes:
        raise NotApplicable("no running GPU or Neuron compute nodes")
    settled_nodes = [n for n in nodes if settled(ctx, n)]
    if not settled_nodes:
        grace = format_duration(ctx.settings.gpu.startup_grace)
        raise NotApplicable(f"every GPU/Neuron node was launched less than {grace} ago")
    return settled_nodes


def judged_nodes(ctx: CheckContext, what: str) -> tuple[ClusterMetrics, list[Judged]]:
    """The snapshot, and the settled nodes whose metrics cover enough of the window to judge.

    The others are recorded as not verified for this check (never as healthy); gpu-metrics-missing says why.
    """
    settled_nodes = settled_accelerated(ctx)
    metrics = cluster_metrics(ctx)
    floor = ctx.settings.gpu.min_coverage_percent / 100
    judged, missing, failed = [], [], []
    for node in settled_nodes:
        node_metrics = metrics.nodes[node.id]
        if node_metrics.failed_queries and not node_metrics.reporting:
            failed.append(ctx.inventory.label(node.id))
        elif node_metrics.coverage < floor:
            missing.append(ctx.inventory.label(node.id))
        else:
            judged.append(Judged(node, node_metrics))
    if missing:
        ctx.unverified(
            f"{what} of {plural(len(missing), 'node')} without usable GPU/Neuron metrics ({id_list(missing)}); "
            f"see {MISSING_CHECK}",
            code="NoMetrics",
        )
    if failed:
        ctx.unverified(f"{what} of {plural(len(failed), 'node')} ({id_list(failed)})", code="InternalError",
                       message="CloudWatch GetMetricData answered InternalError/Forbidden for their series",
                       iam_action="cloudwatch:GetMetricData")
    return metrics, judged


def utilization_metric(ctx: CheckContext, kind: str) -> dict[str, str]:
    """Where this kind's utilization is read from, for evidence and the runbook's commands."""
    gpu = ctx.settings.gpu
    if kind == GPU:
        return {"namespace": gpu.namespace, "metric": gpu.utilization_metric}
    return {"namespace": gpu.neuron_namespace, "metric": gpu.neuron_utilization_metric}


def window_evidence(ctx: CheckContext, metrics: ClusterMetrics) -> dict[str, str]:
    return {
        "window": format_duration(metrics.end - metrics.start),
        "period": format_duration(metrics.period),
        "window_start": metrics.start.isoformat(timespec="seconds"),
        "window_end": metrics.end.isoformat(timespec="seconds"),
    }


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
