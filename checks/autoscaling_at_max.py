from __future__ import annotations

from fmdoctor.config import ClusterSettings
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import ENDPOINT, NODE
from fmdoctor.engine.inventory import InstanceTypeInfo
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference import kinds
from fmdoctor.inference.assess import (
    Load,
    VariantLatency,
    component_load,
    latency_breach,
    ms,
    node_load,
    variant_load,
)
from fmdoctor.inference.queue import describe, queue_of
from fmdoctor.inference.scaling import (
    ASG_TAG,
    COMPONENT_DIMENSION,
    VARIANT_DIMENSION,
    fleet_groups,
    scalable_targets,
)
from fmdoctor.inference.signals import (
    FLEET_PARTS,
    LOAD_ACTIONS,
    Signals,
    fleet_load_readable,
    latency_ms,
    serving_components,
    serving_variants,
    signals_and_types,
)
from fmdoctor.inference.stacks import stack_evidence


class AutoscalingAtMax(Check):
    """No auto-scaled endpoint variant or inference component (Application Auto Scaling target) or inference
    fleet Auto Scaling group is at its maximum capacity while under pressure: latency over the SLO or
    compute saturated (accelerator-saturation's rule: utilisation, never GPU memory alone); for an
    asynchronous endpoint, its queue over the async SLO (inference-latency-slo's rule).

    At the maximum, auto scaling cannot add the instances (or component copies) the load needs: the scaling
    limit, not the model, is the bottleneck, and latency keeps climbing with traffic. Variants scale
    ``sagemaker:variant:DesiredInstanceCount``, components ``sagemaker:inference-component:DesiredCopyCount``
    (docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling.html).
    """

    id = "autoscaling-at-max"
    family = "inference"
    concerns = frozenset({ENDPOINT, NODE})
    severity = Severity.WARNING
    iam_actions = (*LOAD_ACTIONS, "application-autoscaling:DescribeScalableTargets",
                   "autoscaling:DescribeAutoScalingGroups")
    inventory = FLEET_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        loaded = signals_and_types(ctx, "latency and accelerator load at the scaling limit")
        if loaded is None:
            return []
        sig, types = loaded
        findings: list[Finding] = []
        with ctx.guard("scaling limits of the endpoint variants (DescribeScalableTargets)"):
            findings.extend(self._variants(ctx, sig, types))
        with ctx.guard("scaling limits of the inference fleet (DescribeAutoScalingGroups)"):
            findings.extend(self._fleet(ctx, sig, types))
        return findings

    def _variants(self, ctx: CheckContext, sig: Signals, types: dict[str, InstanceTypeInfo]) -> list[Finding]:
        limits = scalable_targets(ctx)
        findings = []
        for endpoint, variant in serving_variants(ctx):
            target = endpoint.variant_resource(variant)
            limit = limits.get(target)
            instances = max(variant.desired_instances, variant.current_instances)
            if limit is None or instances < limit.max_capacity:
                continue
            if endpoint.asynchronous:
                queue = queue_of(sig, endpoint)
                pressure = {"queue": describe(queue, endpoint, ctx.settings)} if queue.breach(ctx.settings) else {}
            else:
                latency = VariantLatency.of(sig, target)
                pressure = _pressure(ctx.settings, latency.model_p90_ms, latency.model_p99_ms,
                                     variant_load(sig, endpoint, variant, types))
            if not pressure:
                continue
            summary = (
                f"{endpoint.name}/{variant.name} is at its auto scaling maximum ({instances} of "
                f"{limit.max_capacity} {variant.instance_type} instances) while {' and '.join(pressure.values())}: "
                "raise MaxCapacity or move to a larger instance type; the scaling limit, not the model, is the "
                "bottleneck."
            )
            evidence = {
                "instances": instances,
                "max_capacity": limit.max_capacity,
                "min_capacity": limit.min_capacity,
                **pressure,
                "scalable_target": target,
                "scalable_dimension": VARIANT_DIMENSION,
                "instance_type": variant.instance_type,
                "endpoint": endpoint.name,
                "variant": variant.name,
                "endpoint_kind": kinds.kind_of(endpoint, variant),
                **stack_evidence(variant.image, variant.image_unread),
                "window": format_duration(ctx.settings.inference.window),
            }
            findings.append(self.finding(target, summary, evidence))
        for endpoint, component in serving_components(ctx):
            limit = limits.get(component.resource)
            copies = max(component.desired_copies, component.current_copies)
            if limit is None or copies < limit.max_capacity:
                continue
            instance_type = next((v.instance_type for v in endpoint.variants if v.name == component.variant), None)
            latency = VariantLatency.of(sig, component.resource)
            pressure = _pressure(ctx.settings, latency.model_p90_ms, latency.model_p99_ms,
                                 component_load(sig, component, instance_type))
            if not pressure:
                continue
            summary = (
                f"Inference component {component.name} is at its auto scaling maximum ({copies} of "
                f"{limit.max_capacity} copies) while {' and '.join(pressure.values())}: raise its MaxCapacity "
                "(and the endpoint's instances for the copies to land on); the scaling limit is the bottleneck."
            )
            evidence = {
                "instances": copies,
                "max_capacity": limit.max_capacity,
                "min_capacity": limit.min_capacity,
                **pressure,
                "scalable_target": component.resource,
                "scalable_dimension": COMPONENT_DIMENSION,
                "instance_type": instance_type,
                "endpoint": endpoint.name,
                "inference_component": component.name,
                "endpoint_kind": kinds.COMPONENTS,
                **stack_evidence(component.image),
                "window": format_duration(ctx.settings.inference.window),
            }
            findings.append(self.finding(component.resource, summary, evidence))
        return findings

    def _fleet(self, ctx: CheckContext, sig: Signals, types: dict[str, InstanceTypeInfo]) -> list[Finding]:
        groups = fleet_groups(ctx)
        unit = ctx.settings.inference.latency_unit
        findings = []
        for name, group in groups.items():
            if (group.desired or 0) < group.max_capacity:
                continue
            members = [n for n in ctx.inventory.inference_nodes() if n.tags.get(ASG_TAG) == name]
            # Without the fleet's GPU series only latency can show pressure (the gap is an error entry).
            loads = fleet_load_readable(ctx, sig, f"accelerator load of Auto Scaling group {name} at its maximum")
            under_pressure = {}
            for node in members:
                info = types.get(node.instance_type)
                pressure = _pressure(ctx.settings, latency_ms(sig.get(node.id, "latency_p90"), unit),
                                     latency_ms(sig.get(node.id, "latency_p99"), unit),
                                     node_load(sig, node, info) if info and loads else None)
                if pressure:
                    under_pressure[node.id] = pressure
            if not under_pressure:
                continue
            first = next(iter(under_pressure.values()))
            summary = (
                f"Auto Scaling group {name} is at its maximum ({group.desired} of {group.max_capacity} instances) "
                f"while {len(under_pressure)} of its {len(members)} inference nodes are under pressure "
                f"({' and '.join(first.values())}): raise MaxSize; the scaling limit is the bottleneck."
            )
            evidence = {
                "desired_capacity": group.desired,
                "max_size": group.max_capacity,
                "min_size": group.min_capacity,
                "nodes_under_pressure": under_pressure,
                "auto_scaling_group": name,
                "window": format_duration(ctx.settings.inference.window),
            }
            findings.append(self.finding(name, summary, evidence))
        return findings


def _pressure(settings: ClusterSettings, p90_ms: float | None, p99_ms: float | None,
              load: Load | None) -> dict[str, str]:
    """Why the target needs more capacity, in words keyed by signal; empty when it does not."""
    slo = settings.inference
    reasons = {}
    breach = latency_breach(p90_ms, p99_ms, slo.latency_p90_ms, slo.latency_p99_ms)
    if breach:
        worst = "p90" if "p90" in breach.percentiles else "p99"
        value, limit = (p90_ms, slo.latency_p90_ms) if worst == "p90" else (p99_ms, slo.latency_p99_ms)
        reasons["latency"] = f"{worst} latency is {ms(value)} ms (SLO {limit:g} ms)"
    if load is not None and not load.unmeasured and load.saturated(slo.saturation_percent):
        what, unit = {"gpu": ("GPUs", "GPU"), "neuron": ("Neuron cores", "core")}.get(load.kind, ("", ""))
        reasons["saturation"] = f"its {what} are saturated ({load.peak():.0f}% per {unit})"
    return reasons
