"""What the GPU, Neuron and EFA-counter checks share: the run's CloudWatch snapshot, and which nodes it can judge."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.metrics.cluster import GPU, ClusterMetrics, NodeMetrics, load_cloudwatch
from fmdoctor.metrics.model import TENSOR_ACTIVE
from fmdoctor.metrics.nodes import shared_lister
from fmdoctor.metrics.targets import MetricNode, ec2_nodes

from ._common import id_list, plural

METRICS_KEY = "cloudwatch.cluster-metrics"
IAM_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "cloudwatch:ListMetrics",
               "cloudwatch:GetMetricData")
MISSING_CHECK = "gpu-metrics-missing"


def accelerated_running(ctx: CheckContext) -> list[MetricNode]:
    return ctx.shared("metrics.nodes", lambda: ec2_nodes(ctx.inventory, ctx.settings.gpu.hostname_tags))


def efa_interfaces(ctx: CheckContext) -> dict[str, str]:
    """Every EFA interface of a running compute instance -> that instance."""
    inv = ctx.inventory
    return {e.id: i.id for i in inv.compute_nodes() if i.state == "running" for e in inv.interfaces_of(i) if e.is_efa}


def cluster_metrics(ctx: CheckContext) -> ClusterMetrics:
    """The run's one CloudWatch snapshot (ListMetrics + batched GetMetricData), shared by every check."""
    def load() -> ClusterMetrics:
        cloudwatch = ctx.client("cloudwatch")
        lister = shared_lister(cloudwatch, ctx.inventory, ctx.settings, ctx.shared)  # inference fleet too
        return load_cloudwatch(cloudwatch, accelerated_running(ctx), efa_interfaces(ctx), ctx.settings.gpu,
                               ctx.now, lister)

    return ctx.shared(METRICS_KEY, load)


def settled(ctx: CheckContext, node: MetricNode | Any) -> bool:
    """Launched long enough ago for its agent and job to be running (``gpu.startup_grace``)."""
    return node.launch_time is None or node.launch_time <= ctx.now - ctx.settings.gpu.startup_grace


def unit(kind: str, count: int = 1) -> str:
    return plural(count, "GPU") if kind == GPU else plural(count, "NeuronCore")


@dataclass(frozen=True)
class Judged:
    node: MetricNode
    metrics: NodeMetrics


def settled_accelerated(ctx: CheckContext) -> list[MetricNode]:
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
            failed.append(node.label)
        elif node_metrics.coverage < floor:
            missing.append(node.label)
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


def utilization_metric(m: NodeMetrics) -> dict[str, str]:
    """Where this node's utilization was read from, for evidence and the runbook's commands."""
    return dict(m.where)


def window_evidence(ctx: CheckContext, metrics: ClusterMetrics) -> dict[str, str]:
    return {
        "window": format_duration(metrics.end - metrics.start),
        "period": format_duration(metrics.period),
        "window_start": metrics.start.isoformat(timespec="seconds"),
        "window_end": metrics.end.isoformat(timespec="seconds"),
    }


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


PEERS_COMPUTE_PERCENT = 10.0  # peers' median tensor activity above which a node at ~0 is doing no math


def populations(ctx: CheckContext, judged: list[Judged]) -> dict[tuple[str, str], dict[str, Judged]]:
    """Busy nodes (mean utilization at or above gpu.idle_percent), grouped so that only nodes of one job's kind
    are compared: the same accelerator kind and the same group (the EC2 cluster, or one HyperPod cluster)."""
    groups: dict[tuple[str, str], dict[str, Judged]] = {}
    for j in judged:
        utilization = j.metrics.utilization
        if utilization is not None and utilization >= ctx.settings.gpu.idle_percent:
            groups.setdefault((j.node.group, j.metrics.kind), {})[j.node.id] = j
    return groups


def no_tensor_work(ctx: CheckContext, busy: dict[str, Judged]) -> dict[str, tuple[float, float]]:
    """Busy nodes whose tensor pipes were idle (DCGM profiling, at or under gpu.no_tensor_work_percent) while
    the median of their peers' was at least PEERS_COMPUTE_PERCENT: node -> (its activity, the peers' median).

    Kernels that keep a GPU 'busy' without tensor work while its peers compute are, on a training job, spinning
    collectives (NCCL waiting for a rank that never arrives) or a stuck loop. Judged against peers, so a job
    that does not use tensor cores at all is never reported."""
    activity = {n: j.metrics.mean(TENSOR_ACTIVE) for n, j in busy.items()}
    known = {n: v for n, v in activity.items() if v is not None}
    found = {}
    for node, value in known.items():
        peers = [v for n, v in known.items() if n != node]
        if len(peers) < 2 or value > ctx.settings.gpu.no_tensor_work_percent:
            continue
        median = statistics.median(peers)
        if median >= PEERS_COMPUTE_PERCENT:
            found[node] = (value, median)
    return found
