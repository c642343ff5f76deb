from __future__ import annotations

from fmdoctor.engine.check import ACCELERATOR_METRICS, Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import INSTANCE_GROUP, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import GPU, ClusterMetrics, NodeMetrics
from fmdoctor.metrics.memory import CEILING_AND_COLLAPSE, MemoryTrouble, memory_trouble
from fmdoctor.metrics.targets import MetricNode

from ._common import id_list, plural
from ._gpu import IAM_ACTIONS, INVENTORY, PREFETCH, judged_nodes, rounded, unit, utilization_metric, window_evidence

BASIS_TEXT = {
    CEILING_AND_COLLAPSE: "memory at the ceiling together with falling utilization",
    "steady-growth": "steady memory growth",
}
WHAT = {
    CEILING_AND_COLLAPSE: "sat at its memory ceiling while its utilization collapsed",
    "steady-growth": "grew its memory steadily across the window",
}


class GpuMemoryPressure(Check):
    """No GPU (or NeuronCore, when its memory metrics are configured) is in memory trouble: none sat at or
    above gpu.memory_pressure_percent of its memory while its utilization fell by gpu.memory_collapse_percent
    of its earlier level, and none grew its memory steadily by gpu.memory_growth_percent points over the window.

    Memory used counts the framework's caching allocator (PyTorch keeps freed blocks; vLLM and TensorRT-LLM
    pre-allocate most of the GPU on purpose), so a full GPU on a healthy large job is normal and is never
    reported on its own. A full GPU whose work collapses (allocator retries, a rank stuck after running out of
    memory), or memory that climbs period after period (a leak), is on its way to an out-of-memory error that
    stops the whole synchronous job. The evidence's ``basis`` says which of the two a finding rests on. Memory
    is nvidia-smi's memory.used/total (CloudWatch agent nvidia_smi_memory_used/_total), Container Insights'
    node_gpu_memory_used/_total, or the DCGM exporter's DCGM_FI_DEV_FB_USED + FB_FREE.
    """

    id = "gpu-memory-pressure"
    family = "gpu"
    concerns = frozenset({NODE, INSTANCE_GROUP})
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS
    prefetch = PREFETCH
    inventory = INVENTORY
    metrics = frozenset({ACCELERATOR_METRICS})

    def run(self, ctx: CheckContext) -> list[Finding]:
        gpu = ctx.settings.gpu
        metrics, judged = judged_nodes(ctx, "GPU memory pressure")
        neuron_memory = bool(gpu.neuron_memory_used_metric and gpu.neuron_memory_total_metric)
        candidates = [j for j in judged if j.metrics.kind == GPU or j.metrics.source != "cloudwatch" or neuron_memory]
        if judged and not candidates:
            raise NotApplicable("Neuron memory metrics are not configured (gpu.neuron_memory_used_metric/_total)")
        findings, unmeasured = [], []
        for j in candidates:
            node, m = j.node, j.metrics
            measured = [d for d in m.reporting if d.memory_percent is not None]
            if not measured:
                unmeasured.append(node.label)
                continue
            troubles = [t for t in (memory_trouble(d, gpu.memory_pressure_percent, gpu.memory_collapse_percent,
                                                   gpu.memory_growth_percent) for d in measured) if t]
            if troubles:
                findings.append(self._finding(ctx, j.node, m, troubles, len(measured), metrics))
        if unmeasured:
            ctx.unverified(
                f"GPU memory of {plural(len(unmeasured), 'node')} that publish utilization but no memory used/total "
                f"({id_list(unmeasured)})",
                code="NoMetrics",
                message=f"expected {gpu.namespace}/{gpu.memory_used_metric} and {gpu.memory_total_metric}",
            )
        return findings

    def _finding(self, ctx: CheckContext, node: MetricNode, m: NodeMetrics, troubles: list[MemoryTrouble],
                 measured: int, metrics: ClusterMetrics) -> Finding:
        gpu = ctx.settings.gpu
        troubles.sort(key=lambda t: (t.basis != CEILING_AND_COLLAPSE, -t.memory_percent))
        first = troubles[0]
        device_word = "GPU" if m.kind == GPU else "NeuronCore"
        if first.basis == CEILING_AND_COLLAPSE:
            how = (f"utilization fell from {first.detail['utilization_before_percent']:g}% to "
                   f"{first.detail['utilization_recent_percent']:g}% while memory sat at "
                   f"{first.detail['peak_memory_recent_percent']:g}%")
        else:
            how = (f"memory rose {first.detail['rise_points']:g} points, from {first.detail['first_percent']:g}% to "
                   f"{first.memory_percent:g}%, every period of the window")
        others = f" ({len(troubles)} {unit(m.kind, len(troubles))} in all)" if len(troubles) > 1 else ""
        return self.finding(
            resource=node.id,
            summary=(
                f"{node.label}'s {device_word} {first.device} {WHAT[first.basis]}: {how}{others}. Based on "
                f"{BASIS_TEXT[first.basis]}, not on how full it is: the job is heading for an out-of-memory error."
            ),
            evidence={
                "instance": node.id,
                "basis": sorted({t.basis for t in troubles}),
                "peak_memory_percent": rounded(max(t.memory_percent for t in troubles)),
                "devices": [{"device": t.device, "basis": t.basis, "memory_percent": t.memory_percent, **t.detail}
                            for t in troubles],
                "memory_pressure_percent": gpu.memory_pressure_percent,
                "memory_collapse_percent": gpu.memory_collapse_percent,
                "memory_growth_percent": gpu.memory_growth_percent,
                "devices_measured": measured,
                "instance_type": node.instance_type,
                "source": m.source,
                **utilization_metric(m),
                **window_evidence(ctx, metrics),
            },
        )
