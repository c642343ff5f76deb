from __future__ import annotations

from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference.assess import Load, accelerated_fleet, node_load, variant_load
from fmdoctor.inference.signals import (
    FLEET_PARTS,
    LOAD_ACTIONS,
    fleet_load_readable,
    serving_variants,
    signals_and_types,
)

from ._common import plural


class AcceleratorSaturation(Check):
    """The GPUs (utilisation and memory) or Neuron cores of every serving endpoint variant and inference
    fleet node averaged below inference.saturation_percent per accelerator over the window.

    SageMaker's GPUUtilization and GPUMemoryUtilization are summed over an instance's GPUs (0-400 % on a
    4-GPU instance), so they are divided by the GPU count of the instance type before the comparison.
    Saturated accelerators queue requests: latency climbs before errors appear.
    """

    id = "accelerator-saturation"
    family = "inference"
    severity = Severity.WARNING
    iam_actions = LOAD_ACTIONS
    inventory = FLEET_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        loaded = signals_and_types(ctx, "accelerator utilisation of the endpoints and fleet nodes")
        if loaded is None:
            return []
        sig, types = loaded
        loads: list[tuple[Load, str, dict[str, Any]]] = []  # load, who, what it is
        for endpoint, variant in serving_variants(ctx):
            load = variant_load(sig, endpoint, variant, types)
            if load is not None:
                loads.append((load, f"{endpoint.name}/{variant.name}", {
                    "endpoint": endpoint.name, "variant": variant.name, "instance_type": variant.instance_type,
                    "instances": variant.current_instances}))
        fleet = list(accelerated_fleet(ctx.inventory.inference_nodes(), types))
        if fleet and not fleet_load_readable(ctx, sig, f"accelerator load of {plural(len(fleet), 'inference node')}"):
            fleet = []
        for node, info in fleet:
            load = node_load(sig, node, info)
            if load is not None:
                loads.append((load, f"inference node {ctx.inventory.label(node.id)}",
                              {"instance": node.id, "instance_type": node.instance_type, "instances": 1}))
        threshold = ctx.settings.inference.saturation_percent
        window = format_duration(ctx.settings.inference.window)
        findings = []
        for load, who, identity in loads:
            if load.unmeasured:
                code, why = load.unmeasured
                ctx.unverified(f"accelerator load of {who}", code, why + (_hint(load) if code == "NoData" else ""))
                continue
            if not load.saturated(threshold):
                continue
            summary = (
                f"{_what(load, who, threshold)} over {window} (limit {threshold:g}%); add instances, raise the "
                f"scaling limit or choose a larger type than {identity['instance_type']}."
            )
            evidence = {
                "utilization_percent": _round(load.utilization_percent),
                "memory_utilization_percent": _round(load.memory_percent),
                "threshold_percent": threshold,
                "accelerators_per_instance": load.accelerators,
                "raw": load.raw,
                "accelerator": load.kind,
                **identity,
                "window": window,
            }
            findings.append(self.finding(load.target, summary, evidence))
        return findings


def _what(load: Load, who: str, threshold: float) -> str:
    if load.kind == "neuron":
        return f"The Neuron cores of {who} averaged {load.utilization_percent:.0f}% busy"
    if load.utilization_percent is not None and load.utilization_percent >= threshold:
        return f"The GPUs of {who} averaged {load.utilization_percent:.0f}% busy each"
    return f"The GPU memory of {who} averaged {load.memory_percent:.0f}% used per GPU"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _hint(load: Load) -> str:
    if load.kind == "neuron":
        return "; publish neuron-monitor's neuroncore_utilization to CloudWatch (gpu.neuron_namespace)"
    if load.target.startswith("endpoint/"):
        return ""
    return ("; no gpu.utilization_metric series names it (InstanceId or host): run the CloudWatch agent's "
            "nvidia_gpu metrics or Container Insights there")
