from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import GPU

from ._common import id_list, plural
from ._gpu import IAM_ACTIONS, judged_nodes, rounded, unit, window_evidence


class GpuMemoryPressure(Check):
    """No GPU (or NeuronCore, when its memory metrics are configured) peaked at or above
    gpu.memory_pressure_percent of its memory during the window.

    Near-full accelerator memory is one longer sequence, larger batch or fragmentation spike away from an
    out-of-memory crash that takes the whole synchronous job down with it.
    """

    id = "gpu-memory-pressure"
    family = "gpu"
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS

    def run(self, ctx: CheckContext) -> list[Finding]:
        gpu = ctx.settings.gpu
        metrics, judged = judged_nodes(ctx, "GPU memory pressure")
        neuron_memory = bool(gpu.neuron_memory_used_metric and gpu.neuron_memory_total_metric)
        candidates = [j for j in judged if j.metrics.kind == GPU or neuron_memory]
        if judged and not candidates:
            raise NotApplicable("Neuron memory metrics are not configured (gpu.neuron_memory_used_metric/_total)")
        findings, unmeasured = [], []
        for j in candidates:
            node, m = j.node, j.metrics
            measured = [d for d in m.reporting if d.memory_percent is not None]
            if not measured:
                unmeasured.append(ctx.inventory.label(node.id))
                continue
            full = sorted((d for d in measured if d.memory_percent >= gpu.memory_pressure_percent),  # type: ignore[operator]
                          key=lambda d: -(d.memory_percent or 0.0))
            if not full:
                continue
            peak = full[0]
            findings.append(
                self.finding(
                    resource=node.id,
                    summary=(
                        f"{ctx.inventory.label(node.id)} has {unit(m.kind, len(full))} of {len(measured)} at or above "
                        f"{gpu.memory_pressure_percent:g}% of memory (peak {peak.memory_percent:.1f}% on "
                        f"{'GPU' if m.kind == GPU else 'NeuronCore'} {peak.device}); the job is close to running "
                        "out of memory."
                    ),
                    evidence={
                        "instance": node.id,
                        "peak_memory_percent": rounded(peak.memory_percent),
                        "devices": [
                            {"device": d.device, "memory_percent": rounded(d.memory_percent),
                             "used": d.memory_used, "total": d.memory_total}
                            for d in full
                        ],
                        "memory_pressure_percent": gpu.memory_pressure_percent,
                        "devices_measured": len(measured),
                        "instance_type": node.instance_type,
                        "namespace": gpu.namespace if m.kind == GPU else gpu.neuron_namespace,
                        "metric": gpu.memory_used_metric if m.kind == GPU else gpu.neuron_memory_used_metric,
                        **window_evidence(ctx, metrics),
                    },
                )
            )
        if unmeasured:
            ctx.unverified(
                f"GPU memory of {plural(len(unmeasured), 'node')} that publish utilization but no memory used/total "
                f"({id_list(unmeasured)})",
                code="NoMetrics",
                message=f"expected {gpu.namespace}/{gpu.memory_used_metric} and {gpu.memory_total_metric}",
            )
        return findings
