from __future__ import annotations

from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import ENDPOINT, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference import kinds
from fmdoctor.inference.assess import Load, accelerated_fleet, component_load, node_load, variant_load
from fmdoctor.inference.signals import (
    FLEET_PARTS,
    LOAD_ACTIONS,
    fleet_load_readable,
    serving_components,
    serving_variants,
    signals_and_types,
)
from fmdoctor.inference.stacks import stack_evidence

from ._common import plural


class AcceleratorSaturation(Check):
    """The compute of every serving endpoint variant, inference component and inference fleet node averaged
    below inference.saturation_percent over the window: GPU utilisation per GPU, Neuron core utilisation, a
    component's GPUUtilizationNormalized, a serverless endpoint's ServerlessConcurrentExecutionsUtilization.

    Saturation is compute saturation. GPU memory alone never is: vLLM, TensorRT-LLM, TGI and LMI reserve
    most of each GPU's memory for their KV cache at start-up (fmdoctor.inference.stacks cites each), so it is
    reported beside utilisation, with the serving stack recognised from the model's container image and
    whether high memory is expected on it. SageMaker's GPUUtilization and GPUMemoryUtilization are summed
    over an instance's GPUs (0-400 % on a 4-GPU instance), so they are divided by the GPU count of the
    instance type; the inference-component metrics are already normalised to what each copy reserved
    (docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html). Saturated compute queues requests:
    latency climbs before errors appear.
    """

    id = "accelerator-saturation"
    family = "inference"
    concerns = frozenset({ENDPOINT, NODE})
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
                    "endpoint": endpoint.name, "variant": variant.name,
                    "endpoint_kind": kinds.kind_of(endpoint, variant), "instance_type": variant.instance_type,
                    "instances": variant.current_instances,
                    "serverless_max_concurrency": variant.serverless_max_concurrency,
                    **stack_evidence(variant.image, variant.image_unread)}))
        for endpoint, component in serving_components(ctx):
            instance_type = next((v.instance_type for v in endpoint.variants if v.name == component.variant), None)
            load = component_load(sig, component, instance_type)
            if load is not None:
                loads.append((load, f"inference component {component.name}", {
                    "endpoint": endpoint.name, "inference_component": component.name,
                    "endpoint_kind": kinds.COMPONENTS, "instance_type": instance_type,
                    "instances": component.current_copies, **stack_evidence(component.image)}))
        fleet = list(accelerated_fleet(ctx.inventory.inference_nodes(), types))
        if fleet and not fleet_load_readable(ctx, sig, f"accelerator load of {plural(len(fleet), 'inference node')}"):
            fleet = []
        for node, info in fleet:
            load = node_load(sig, node, info)
            if load is not None:
                loads.append((load, f"inference node {ctx.inventory.label(node.id)}",
                              {"instance": node.id, "instance_type": node.instance_type, "instances": 1,
                               "endpoint_kind": "fleet", **stack_evidence(None), **sig.source_of(node.id)}))
        return [f for load, who, identity in loads if (f := self._judge(ctx, load, who, identity))]

    def _judge(self, ctx: CheckContext, load: Load, who: str, identity: dict[str, Any]) -> Finding | None:
        threshold = ctx.settings.inference.saturation_percent
        if load.unmeasured:
            code, why = load.unmeasured
            ctx.unverified(f"accelerator load of {who}", code, why + (_hint(load) if code == "NoData" else ""))
            return None
        if not load.saturated(threshold):
            return None
        window = format_duration(ctx.settings.inference.window)
        summary = f"{_what(load, who)} over {window} (limit {threshold:g}%); {_fix(load, identity)}"
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
        return self.finding(load.target, summary, evidence)


def _what(load: Load, who: str) -> str:
    if load.kind == "concurrency":
        return f"Serverless endpoint {who} ran at up to {load.utilization_percent:.0f}% of its MaxConcurrency"
    if load.kind == "neuron":
        return f"The Neuron cores of {who} averaged {load.utilization_percent:.0f}% busy"
    return f"The GPUs of {who} averaged {load.utilization_percent:.0f}% busy each"


def _fix(load: Load, identity: dict[str, Any]) -> str:
    if load.kind == "concurrency":
        return "raise MaxConcurrency (or ProvisionedConcurrency) before requests are throttled."
    if "inference_component" in identity:
        return "add copies (raise the component's scaling maximum) or instances for them to land on."
    return f"add instances, raise the scaling limit or choose a larger type than {identity['instance_type']}."


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _hint(load: Load) -> str:
    if load.kind == "neuron":
        return "; publish neuron-monitor's neuroncore_utilization to CloudWatch (gpu.neuron_namespace)"
    if load.target.startswith(("endpoint/", "inference-component/")):
        return ""
    return ("; no gpu.utilization_metric series names it (InstanceId or host): run the CloudWatch agent's "
            "nvidia_gpu metrics or Container Insights there")
