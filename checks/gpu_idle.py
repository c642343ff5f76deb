from __future__ import annotations

from fmdoctor.engine.check import ACCELERATOR_METRICS, Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import INSTANCE_GROUP, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import GPU, ClusterMetrics
from fmdoctor.metrics.model import TENSOR_ACTIVE

from ._gpu import (
    IAM_ACTIONS,
    INVENTORY,
    PEERS_COMPUTE_PERCENT,
    PREFETCH,
    Judged,
    judged_nodes,
    no_tensor_work,
    populations,
    rounded,
    unit,
    utilization_metric,
    window_evidence,
)


class GpuIdle(Check):
    """Every running GPU/Neuron node with metrics kept its accelerators doing work: averaged over the window,
    its utilization is at or above gpu.idle_percent, and where DCGM profiling metrics are published, a busy
    node's tensor pipes are not idle (at or under gpu.no_tensor_work_percent) while its peers' compute.

    An idle p5.48xlarge still bills by the hour; idle nodes in a training cluster are usually a drained
    node nobody stopped, a job that died on one node, or a scheduler that lost track of it. Utilization
    (nvidia-smi utilization.gpu, DCGM_FI_DEV_GPU_UTIL) only says a kernel was running: a rank spinning in an
    NCCL collective that never completes shows 100 %. Tensor-core activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE,
    NVIDIA DCGM profiling metrics) tells that node apart, judged against its peers so a job that does not use
    tensor cores is never reported. The evidence's ``basis`` says which verdict a finding rests on.
    """

    id = "gpu-idle"
    family = "gpu"
    concerns = frozenset({NODE, INSTANCE_GROUP})
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS
    prefetch = PREFETCH
    inventory = INVENTORY
    metrics = frozenset({ACCELERATOR_METRICS})

    def run(self, ctx: CheckContext) -> list[Finding]:
        metrics, judged_list = judged_nodes(ctx, "GPU idleness")
        threshold = ctx.settings.gpu.idle_percent
        findings = []
        for judged in judged_list:
            node, m = judged.node, judged.metrics
            utilization = m.utilization
            if utilization is None or utilization >= threshold:
                continue
            busiest = max(m.reporting, key=lambda d: d.mean_utilization or 0.0)
            what = unit(m.kind, len(m.reporting))
            findings.append(
                self.finding(
                    resource=node.id,
                    summary=(
                        f"{node.label} averaged {utilization:.1f}% "
                        f"utilization on its {what} over the last {window_evidence(ctx, metrics)['window']}, "
                        f"under the {threshold:g}% idle threshold; find out whether its job died or stop it."
                    ),
                    evidence={
                        "instance": node.id,
                        "basis": "utilization",
                        "utilization_percent": rounded(utilization),
                        "idle_percent": threshold,
                        "busiest_device": {"device": busiest.device,
                                           "utilization_percent": rounded(busiest.mean_utilization)},
                        "instance_type": node.instance_type,
                        "accelerator": "gpu" if m.kind == GPU else "neuron",
                        "devices_reporting": len(m.reporting),
                        "datapoints": m.datapoints,
                        "source": m.source,
                        **utilization_metric(m),
                        **window_evidence(ctx, metrics),
                    },
                )
            )
        for busy in populations(ctx, judged_list).values():
            for node_id, (activity, peers) in sorted(no_tensor_work(ctx, busy).items()):
                findings.append(self._no_tensor_work(ctx, busy[node_id], activity, peers, len(busy), metrics))
        return findings

    def _no_tensor_work(self, ctx: CheckContext, j: Judged, activity: float, peers: float, compared: int,
                        metrics: ClusterMetrics) -> Finding:
        node, m = j.node, j.metrics
        busiest = max(m.reporting, key=lambda d: d.mean_utilization or 0.0)
        return self.finding(
            resource=node.id,
            summary=(
                f"{node.label} reports {m.utilization:.1f}% utilization on its {unit(m.kind, len(m.reporting))}, "
                f"but their tensor cores were active {activity:.1f}% of the time while its peers' median was "
                f"{peers:.1f}%: kernels run but do no math, usually a rank spinning in a collective that never "
                "completes or a stuck job. Based on tensor activity against its peers, not utilization."
            ),
            evidence={
                "instance": node.id,
                "basis": "no-tensor-work",
                "utilization_percent": rounded(m.utilization),
                "tensor_active_percent": rounded(activity, 2),
                "peers_tensor_active_percent": rounded(peers),
                "no_tensor_work_percent": ctx.settings.gpu.no_tensor_work_percent,
                "peers_compute_percent": PEERS_COMPUTE_PERCENT,
                "nodes_compared": compared,
                "idle_percent": ctx.settings.gpu.idle_percent,
                "busiest_device": {"device": busiest.device, "utilization_percent": rounded(busiest.mean_utilization),
                                   "tensor_active_percent": rounded(busiest.mean(TENSOR_ACTIVE), 2)},
                "instance_type": node.instance_type,
                "accelerator": "gpu" if m.kind == GPU else "neuron",
                "devices_reporting": len(m.reporting),
                "datapoints": m.datapoints,
                "source": m.source,
                **utilization_metric(m),
                **window_evidence(ctx, metrics),
            },
        )
