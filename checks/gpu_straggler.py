from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.robust import MIN_POPULATION, low_outliers

from ._gpu import IAM_ACTIONS, judged_nodes, rounded, unit, utilization_metric, window_evidence


class GpuStraggler(Check):
    """No busy GPU/Neuron node runs well below the cluster's median utilization: none is both
    gpu.straggler_robust_z modified z-scores (median/MAD) and gpu.straggler_min_gap_percent points below it.

    In a synchronous job every step waits for the slowest rank, so one node held back by throttled clocks,
    a sick GPU, a starved data loader or a thin network path slows the whole cluster. Idle nodes are left
    to gpu-idle; GPU and Neuron nodes are compared only with their own kind.
    """

    id = "gpu-straggler"
    family = "gpu"
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS

    def run(self, ctx: CheckContext) -> list[Finding]:
        gpu = ctx.settings.gpu
        metrics, judged = judged_nodes(ctx, "GPU straggler detection")
        populations: dict[str, dict[str, float]] = {}
        for j in judged:
            utilization = j.metrics.utilization
            if utilization is not None and utilization >= gpu.idle_percent:
                populations.setdefault(j.metrics.kind, {})[j.node.id] = utilization
        compared = {kind: busy for kind, busy in populations.items() if len(busy) >= MIN_POPULATION}
        if not compared:
            largest = max((len(b) for b in populations.values()), default=0)
            raise NotApplicable(
                f"needs at least {MIN_POPULATION} busy nodes of one accelerator kind to compare, found {largest}"
            )
        by_id = {j.node.id: j for j in judged}
        findings = []
        for kind, busy in compared.items():
            for outlier in low_outliers(busy, gpu.straggler_robust_z, gpu.straggler_min_gap_percent):
                node, m = by_id[outlier.key].node, by_id[outlier.key].metrics
                slowest = min(m.reporting, key=lambda d: d.mean_utilization or 0.0)
                findings.append(
                    self.finding(
                        resource=node.id,
                        summary=(
                            f"{ctx.inventory.label(node.id)} averaged {outlier.value:.1f}% utilization on its "
                            f"{unit(kind, len(m.reporting))}, {outlier.gap:.1f} points below the cluster median "
                            f"of {outlier.median:.1f}% (robust z {outlier.z:.1f}); it is likely slowing every "
                            "step: check its clocks, Xid errors and network before draining it."
                        ),
                        evidence={
                            "instance": node.id,
                            "utilization_percent": rounded(outlier.value),
                            "cluster_median_percent": rounded(outlier.median),
                            "gap_points": rounded(outlier.gap),
                            "robust_z": rounded(outlier.z, 2),
                            "mad_points": rounded(outlier.mad, 2),
                            "z_threshold": gpu.straggler_robust_z,
                            "min_gap_points": gpu.straggler_min_gap_percent,
                            "nodes_compared": len(busy),
                            "slowest_device": {"device": slowest.device,
                                               "utilization_percent": rounded(slowest.mean_utilization)},
                            "instance_type": node.instance_type,
                            **utilization_metric(ctx, kind),
                            **window_evidence(ctx, metrics),
                        },
                    )
                )
        return findings
