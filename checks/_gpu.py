"""What the GPU, Neuron and EFA-counter checks share: the run's metrics snapshot, and which nodes it can judge."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.inventory import HYPERPOD, INSTANCES
from fmdoctor.metrics.cluster import GPU, ClusterMetrics, NodeMetrics
from fmdoctor.metrics.model import TENSOR_ACTIVE
from fmdoctor.metrics.targets import MetricNode

from ._common import id_list, plural
from ._gpu_sources import IAM_ACTIONS, METRICS_KEY, PREFETCH, cluster_metrics, efa_interfaces, metric_targets

__all__ = ["IAM_ACTIONS", "INVENTORY", "METRICS_KEY", "PREFETCH", "cluster_metrics", "efa_interfaces"]
MISSING_CHECK = "gpu-metrics-missing"
INVENTORY = frozenset({INSTANCES, HYPERPOD})  # HyperPod's nodes are no EC2 instances of this account


def accelerated_running(ctx: CheckContext) -> list[MetricNode]:
    """Running GPU/Neuron nodes: the cluster's EC2 compute instances and its HyperPod cluster's Running nodes.
    A HyperPod cluster that could not be listed is recorded as not verified."""
    targets = metric_targets(ctx)
    if targets.hyperpod_failure is not None:
        failure = targets.hyperpod_failure
        ctx.unverified(f"the GPUs of HyperPod cluster {targets.hyperpod_name}'s nodes", failure.code, failure.message,
                       failure.iam_action)
        if not targets.nodes:
            raise Unverified(failure.message)
    return list(targets.nodes)


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


def report_unseen(ctx: CheckContext, what: str, metrics: ClusterMetrics, nodes: list[MetricNode],
                  require_one: bool = True, efa: bool = False) -> list[MetricNode]:
    """Record the nodes no source could be asked about, whose source failed, or whose source holds too little of
    the window yet (for their EFA counters when ``efa``), as not verified for ``what``; the others are returned.
    When none is left (and ``require_one``), nothing was verified: :class:`Unverified`."""
    unseen: dict[str, list[str]] = defaultdict(list)
    unreadable: dict[Any, list[str]] = defaultdict(list)
    starting: dict[str, list[str]] = defaultdict(list)
    young = metrics.efa_starting if efa else metrics.starting
    rest = []
    for node in nodes:
        if node.id in metrics.unseen:
            unseen[metrics.unseen[node.id]].append(node.label)
        elif node.id in young:
            starting[young[node.id]].append(node.label)
        elif node.id in metrics.unreadable:
            unreadable[metrics.unreadable[node.id]].append(node.label)
        else:
            rest.append(node)
    for why, labels in unseen.items():
        ctx.unverified(f"{what} of {plural(len(labels), 'node')} no metric source sees ({id_list(labels)})",
                       code="NoMetricSource", message=why)
    for why, labels in starting.items():
        ctx.unverified(f"{what} of {plural(len(labels), 'node')} ({id_list(labels)})", code="MetricSourceStarting",
                       message=why)
    for failure, labels in unreadable.items():
        ctx.unverified(f"{what} of {plural(len(labels), 'node')} ({id_list(labels)})", failure.code,
                       failure.message, failure.iam_action)
    if require_one and not rest and nodes:
        raise Unverified(f"no metric source could be read for the {plural(len(nodes), 'node')} to check")
    return rest


def judged_nodes(ctx: CheckContext, what: str) -> tuple[ClusterMetrics, list[Judged]]:
    """The snapshot, and the settled nodes whose metrics cover enough of the window to judge.

    The others are recorded as not verified for this check (never as healthy); gpu-metrics-missing says why.
    """
    settled_nodes = settled_accelerated(ctx)
    metrics = cluster_metrics(ctx)
    floor = ctx.settings.gpu.min_coverage_percent / 100
    judged, missing, failed = [], [], []
    for node in report_unseen(ctx, what, metrics, settled_nodes):
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
