from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import GPU

from ._gpu import IAM_ACTIONS, judged_nodes, rounded, unit, utilization_metric, window_evidence


class GpuIdle(Check):
    """Every running GPU/Neuron node with metrics kept its accelerators busy: averaged over the window, its
    utilization is at or above gpu.idle_percent.

    An idle p5.48xlarge still bills by the hour; idle nodes in a training cluster are usually a drained
    node nobody stopped, a job that died on one node, or a scheduler that lost track of it.
    """

    id = "gpu-idle"
    family = "gpu"
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS

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
                        f"{ctx.inventory.label(node.id)} averaged {utilization:.1f}% "
                        f"utilization on its {what} over the last {window_evidence(ctx, metrics)['window']}, "
                        f"under the {threshold:g}% idle threshold; find out whether its job died or stop it."
                    ),
                    evidence={
                        "instance": node.id,
                        "utilization_percent": rounded(utilization),
                        "idle_percent": threshold,
                        "busiest_device": {"device": busiest.device,
                                           "utilization_percent": rounded(busiest.mean_utilization)},
                        "instance_type": node.instance_type,
                        "accelerator": "gpu" if m.kind == GPU else "neuron",
                        "devices_reporting": len(m.reporting),
                        "datapoints": m.datapoints,
                        **utilization_metric(ctx, m.kind),
                        **window_evidence(ctx, metrics),
                    },
                )
            )
        return findings
