from __future__ import annotations

from datetime import datetime

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import ENDPOINT, NODE
from fmdoctor.engine.inventory import InstanceTypeInfo
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference import kinds
from fmdoctor.inference.assess import accelerated_fleet, node_load
from fmdoctor.inference.metrics import Window
from fmdoctor.inference.queue import queue_of
from fmdoctor.inference.signals import (
    FLEET_PARTS,
    LOAD_ACTIONS,
    Signals,
    fleet_load_readable,
    latency_metric_unpublished,
    serving_components,
    serving_variants,
    signals_and_types,
)

from ._common import plural


class InferenceIdle(Check):
    """Every InService endpoint variant with running instances and older than the window had requests in
    it (Invocations; InvocationsProcessed or a queued request on an asynchronous endpoint), every inference
    component with copies had Invocations, and every accelerated inference fleet node served requests
    (inference.latency_metric's sample count) or, without that metric, kept its accelerators above
    inference.idle_utilization_percent.

    SageMaker publishes Invocations only for minutes with traffic, so no datapoint over the whole window
    means no request; an asynchronous endpoint publishes no Invocations at all
    (docs.aws.amazon.com/sagemaker/latest/dg/async-inference-monitor.html), and one scaled to zero with an
    empty queue, like a serverless endpoint, costs nothing: neither is idle. A latency_metric that no fleet
    node publishes at all is a NoData error, not an idle fleet. Idle GPU and Neuron capacity is money spent
    for nothing (warning); idle CPU-only variants are reported for information.
    """

    id = "inference-idle"
    family = "inference"
    concerns = frozenset({ENDPOINT, NODE})
    severity = Severity.WARNING
    iam_actions = LOAD_ACTIONS
    inventory = FLEET_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        loaded = signals_and_types(ctx, "invocations of the endpoints and fleet nodes")
        if loaded is None:
            return []
        sig, types = loaded
        return [*self._variants(ctx, sig, types), *self._fleet(ctx, sig, types)]

    def _variants(self, ctx: CheckContext, sig: Signals, types: dict[str, InstanceTypeInfo]) -> list[Finding]:
        window = format_duration(ctx.settings.inference.window)
        findings = []
        for endpoint, variant in serving_variants(ctx):
            kind = kinds.kind_of(endpoint, variant)
            if endpoint.status != "InService" or kind in (kinds.SERVERLESS, kinds.COMPONENTS):
                continue  # serverless costs nothing idle; components are judged one by one
            if variant.current_instances == 0 or not _existed_throughout(endpoint.created, sig.window):
                continue
            target = endpoint.variant_resource(variant)
            if kind == kinds.ASYNC:
                queue = queue_of(sig, endpoint)
                if sig.get(target, "processed") or queue.backlog:
                    continue
                if not queue.seen:
                    ctx.unverified(f"whether asynchronous endpoint {endpoint.name} is idle", "NoData",
                                   "no InvocationsProcessed and no ApproximateBacklogSize datapoints in the window")
                    continue
            elif sig.get(target, "invocations"):
                continue
            info = types.get(variant.instance_type or "")
            accelerated = bool(info and info.accelerated)
            what = _accelerators(info) if accelerated else "CPU-only"
            advice = ("let it scale to zero while its queue is empty (scalable target MinCapacity 0)"
                      if kind == kinds.ASYNC else "scale it in or delete the endpoint")
            summary = (
                f"{endpoint.name}/{variant.name} ({variant.current_instances} x {variant.instance_type}, {what}) "
                f"served no requests in the last {window}: {advice}."
            )
            evidence = {
                "invocations": 0,
                "requests_metric": "InvocationsProcessed" if kind == kinds.ASYNC else "Invocations",
                "endpoint_kind": kind,
                "instances": variant.current_instances,
                "instance_type": variant.instance_type,
                "accelerated": accelerated,
                "endpoint": endpoint.name,
                "variant": variant.name,
                "endpoint_created": endpoint.created.isoformat() if endpoint.created else None,
                "window": window,
            }
            findings.append(self.finding(target, summary, evidence,
                                         severity=Severity.WARNING if accelerated else Severity.INFO))
        return findings + self._components(ctx, sig, window)

    def _components(self, ctx: CheckContext, sig: Signals, window: str) -> list[Finding]:
        """A component with copies and no Invocations holds the accelerators its copies reserved for nothing;
        one scaled to zero copies holds none."""
        findings = []
        for endpoint, component in serving_components(ctx):
            if component.status != "InService" or component.current_copies == 0:
                continue
            if not _existed_throughout(component.created, sig.window) or sig.get(component.resource, "invocations"):
                continue
            summary = (
                f"Inference component {component.name} on {endpoint.name} ({component.current_copies} "
                f"cop{'ies' if component.current_copies != 1 else 'y'}) served no requests in the last {window}: "
                "scale its copies in (MinCapacity 0 lets it scale to zero) or delete it."
            )
            evidence = {
                "invocations": 0,
                "requests_metric": "Invocations",
                "endpoint_kind": kinds.COMPONENTS,
                "copies": component.current_copies,
                "accelerators_per_copy": component.accelerators_per_copy,
                "endpoint": endpoint.name,
                "inference_component": component.name,
                "window": window,
            }
            severity = Severity.WARNING if component.accelerators_per_copy else Severity.INFO
            findings.append(self.finding(component.resource, summary, evidence, severity=severity))
        return findings

    def _fleet(self, ctx: CheckContext, sig: Signals, types: dict[str, InstanceTypeInfo]) -> list[Finding]:
        settings = ctx.settings.inference
        window = format_duration(settings.window)
        fleet = [(node, info) for node, info in accelerated_fleet(ctx.inventory.inference_nodes(), types)
                 if _existed_throughout(node.launch_time, sig.window)]
        unpublished = latency_metric_unpublished(ctx, sig)
        if fleet and unpublished:
            ctx.unverified(f"whether the {plural(len(fleet), 'accelerated inference node')} served requests",
                           "NoData", unpublished)
            return []
        if fleet and not settings.latency_metric and not fleet_load_readable(
                ctx, sig, f"idleness of {plural(len(fleet), 'accelerated inference node')}"):
            return []
        findings = []
        for node, info in fleet:
            if settings.latency_metric:
                requests = sig.get(node.id, "requests") or 0.0
                if requests:
                    continue
                signal = {"requests": 0, "metric": settings.latency_metric}
            else:
                load = node_load(sig, node, info)
                peak = None if load is None else sig.get(node.id, f"{load.kind}_util_max")
                if peak is None:
                    ctx.unverified(f"whether inference node {node.id} is idle", "NoData",
                                   "no accelerator utilisation datapoints in the window and no latency_metric set")
                    continue
                if peak > settings.idle_utilization_percent:
                    continue
                signal = {"max_utilization_percent": round(peak, 1),
                          "idle_utilization_percent": settings.idle_utilization_percent, **sig.source_of(node.id)}
            summary = (
                f"Inference node {ctx.inventory.label(node.id)} on {node.instance_type} ({_accelerators(info)}) "
                f"served no requests in the last {window}: scale the fleet in or stop the node."
            )
            evidence = {**signal, "instance": node.id, "instance_type": node.instance_type, "endpoint_kind": "fleet",
                        "window": window}
            findings.append(self.finding(node.id, summary, evidence))
        return findings


def _existed_throughout(since: datetime | None, window: Window) -> bool:
    """Only what existed for the whole window can be idle in it (unknown age: assume it did)."""
    return since is None or since <= window.start


def _accelerators(info: InstanceTypeInfo | None) -> str:
    if info is None:
        return "accelerators unknown"
    if info.gpus:
        return f"{info.gpus} x {info.gpu_model or 'GPU'}"
    if info.neuron_devices:
        return f"{info.neuron_devices} Neuron device{'s' if info.neuron_devices != 1 else ''}"
    return "CPU-only"
