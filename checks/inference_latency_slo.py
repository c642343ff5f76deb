from __future__ import annotations

from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.endpoints import Endpoint
from fmdoctor.engine.entities import ENDPOINT, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference import kinds
from fmdoctor.inference.assess import LatencyBreach, VariantLatency, latency_breach, ms
from fmdoctor.inference.queue import describe, queue_evidence, queue_of
from fmdoctor.inference.signals import (
    FLEET_PARTS,
    SIGNAL_ACTIONS,
    Signals,
    latency_metric_unpublished,
    latency_ms,
    serving_components,
    serving_endpoints,
    serving_variants,
    signals_or_none,
    targets_or_skip,
)


class InferenceLatencySlo(Check):
    """Every endpoint meets the latency SLO of its kind over the window: the p90 and p99 ModelLatency (and
    SageMaker's OverheadLatency) of real-time and serverless variants, of inference components and of
    inference fleet nodes (inference.latency_metric) are within inference.latency_p90_ms and latency_p99_ms;
    serverless cold starts (p90 ModelSetupTime) within inference.serverless_max_cold_start; and the queue
    of every asynchronous endpoint holds no request older than inference.async_max_age and is not growing.

    A p90 over the SLO (one request in ten too slow) is critical, a p99 alone a warning. The real-time SLO
    never applies to an asynchronous endpoint, whose requests may each take up to an hour: its SLO is the
    queue (ApproximateAgeOfOldestRequest, ApproximateBacklogSize; docs.aws.amazon.com/sagemaker/latest/dg/
    async-inference-monitor.html). ModelSetupTime is the time to launch compute for a serverless endpoint
    (docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html).
    """

    id = "inference-latency-slo"
    family = "inference"
    concerns = frozenset({ENDPOINT, NODE})
    severity = Severity.WARNING
    iam_actions = SIGNAL_ACTIONS
    inventory = FLEET_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        targets_or_skip(ctx)
        sig = signals_or_none(ctx, "latency of the endpoints and fleet nodes (CloudWatch GetMetricData)")
        if sig is None:
            return []
        findings = []
        for endpoint, variant in serving_variants(ctx):
            kind = kinds.kind_of(endpoint, variant)
            if kind in (kinds.ASYNC, kinds.COMPONENTS):
                continue  # the queue per endpoint, latency per component (below)
            identity = {"endpoint": endpoint.name, "variant": variant.name, "endpoint_kind": kind,
                        "instance_type": variant.instance_type, "instances": variant.current_instances}
            findings += self._requests(ctx, sig, endpoint.variant_resource(variant), f"{endpoint.name}/{variant.name}",
                                       identity, serverless=kind == kinds.SERVERLESS)
        for endpoint in serving_endpoints(ctx):
            if endpoint.asynchronous:
                findings += self._queue(ctx, sig, endpoint)
        for endpoint, component in serving_components(ctx):
            identity = {"endpoint": endpoint.name, "inference_component": component.name,
                        "endpoint_kind": kinds.COMPONENTS, "copies": component.current_copies}
            findings += self._requests(ctx, sig, component.resource, f"inference component {component.name}",
                                       identity, serverless=False)
        findings.extend(self._fleet(ctx, sig))
        return findings

    def _requests(self, ctx: CheckContext, sig: Signals, target: str, who: str, identity: dict[str, Any],
                  serverless: bool) -> list[Finding]:
        slo = ctx.settings.inference
        window = format_duration(slo.window)
        latency = VariantLatency.of(sig, target)
        breach = _worst(latency.breach(ctx.settings), latency.overhead_breach(ctx.settings))
        cold_ms = latency_ms(sig.get(target, "cold_start_p90"), "microseconds") if serverless else None
        cold_limit_ms = slo.serverless_max_cold_start.total_seconds() * 1000
        cold_breach = cold_ms is not None and cold_ms > cold_limit_ms
        if breach is None and not cold_breach:
            return []
        sentences = []
        platform_slow = False
        if breach is not None:
            worst = "p90" if "p90" in breach.percentiles else "p99"
            model_value = latency.model_p90_ms if worst == "p90" else latency.model_p99_ms
            overhead_value = latency.overhead_p90_ms if worst == "p90" else latency.overhead_p99_ms
            limit = slo.latency_p90_ms if worst == "p90" else slo.latency_p99_ms
            platform_slow = (overhead_value or 0.0) > (model_value or 0.0)
            culprit = ("the time goes to SageMaker's overhead, not the model" if platform_slow
                       else "the time goes to the model container, not SageMaker's overhead")
            if platform_slow and serverless:
                culprit += " (on a serverless endpoint the overhead includes cold starts)"
            parts = f"model {ms(model_value)} ms" + (f", overhead {ms(overhead_value)} ms" if overhead_value else "")
            sentences.append(f"{worst} latency of {who} is {ms(overhead_value if platform_slow else model_value)} ms "
                             f"over {window}, above the {limit:g} ms SLO ({parts}): {culprit}.")
        if cold_breach:
            sentences.append(f"Cold starts of {who} take {ms(cold_ms)} ms at p90 (ModelSetupTime), above "
                             f"{format_duration(slo.serverless_max_cold_start)}: give it ProvisionedConcurrency.")
        evidence = {
            "model_latency_p90_ms": ms(latency.model_p90_ms),
            "model_latency_p99_ms": ms(latency.model_p99_ms),
            "slo_p90_ms": slo.latency_p90_ms,
            "slo_p99_ms": slo.latency_p99_ms,
            "overhead_latency_p90_ms": ms(latency.overhead_p90_ms),
            "overhead_latency_p99_ms": ms(latency.overhead_p99_ms),
            "breached": [*(breach.percentiles if breach else ()), *(["cold_start"] if cold_breach else [])],
            "slow_part": "platform" if platform_slow else "model",
            **identity,
            "window": window,
            "metrics": "AWS/SageMaker ModelLatency, OverheadLatency (microseconds, shown in ms)",
        }
        if serverless:
            evidence.update(cold_start_p90_ms=ms(cold_ms), cold_start_limit_ms=cold_limit_ms,
                            cold_starts=sig.get(target, "cold_starts"))
        severity = breach.severity if breach is not None else Severity.WARNING
        return [self.finding(target, " ".join(sentences), evidence, severity=severity)]

    def _queue(self, ctx: CheckContext, sig: Signals, endpoint: Endpoint) -> list[Finding]:
        """An asynchronous endpoint is judged by its queue, never by the real-time latency SLO."""
        queue = queue_of(sig, endpoint)
        window = format_duration(ctx.settings.inference.window)
        if not queue.seen:
            ctx.unverified(f"queue of asynchronous endpoint {endpoint.name}", "NoData",
                           f"no ApproximateBacklogSize datapoints (AWS/SageMaker, EndpointName) over {window}")
            return []
        breach = queue.breach(ctx.settings)
        if breach is None:
            return []
        instances = sum(v.current_instances for v in endpoint.variants)
        if instances == 0:
            fix = ("no instance is running to work through it: with MinCapacity 0, add a step scaling policy on "
                   "HasBacklogWithoutCapacity so the endpoint scales out from zero")
        else:
            fix = (f"its {instances} instance{'s' if instances != 1 else ''} cannot keep up: raise MaxCapacity or "
                   "scale on ApproximateBacklogSizePerInstance")
        summary = f"Asynchronous endpoint {endpoint.name}: {describe(queue, endpoint, ctx.settings)}; {fix}."
        target = endpoint.variant_resource(endpoint.variants[0]) if endpoint.variants else ""
        evidence = {
            **queue_evidence(queue, endpoint, ctx.settings),
            "breached": list(breach.reasons),
            "instances": instances,
            "model_latency_p90_ms": ms(latency_ms(sig.get(target, "model_p90"), "microseconds")),
            "time_in_backlog_p90_ms": ms(latency_ms(sig.get(target, "backlog_time_p90"), "microseconds")),
            "endpoint": endpoint.name,
            "endpoint_kind": kinds.ASYNC,
            "window": window,
            "metrics": "AWS/SageMaker ApproximateAgeOfOldestRequest (seconds), ApproximateBacklogSize (EndpointName)",
        }
        return [self.finding(endpoint.resource, summary, evidence, severity=breach.severity)]

    def _fleet(self, ctx: CheckContext, sig: Signals) -> list[Finding]:
        slo = ctx.settings.inference
        if not slo.latency_metric:
            return []
        unpublished = latency_metric_unpublished(ctx, sig)
        if unpublished:
            nodes = len(ctx.inventory.inference_nodes())
            ctx.unverified(f"latency of {nodes} inference node{'s' if nodes != 1 else ''}", "NoData", unpublished)
            return []
        window = format_duration(slo.window)
        namespace, metric = slo.latency_metric.rsplit("/", 1)
        findings = []
        for node in ctx.inventory.inference_nodes():
            p90 = latency_ms(sig.get(node.id, "latency_p90"), slo.latency_unit)
            p99 = latency_ms(sig.get(node.id, "latency_p99"), slo.latency_unit)
            breach = latency_breach(p90, p99, slo.latency_p90_ms, slo.latency_p99_ms)
            if breach is None:
                continue
            worst = "p90" if "p90" in breach.percentiles else "p99"
            value, limit = (p90, slo.latency_p90_ms) if worst == "p90" else (p99, slo.latency_p99_ms)
            summary = (f"{worst} latency on inference node {ctx.inventory.label(node.id)} is {ms(value)} ms over "
                       f"{window}, above the {limit:g} ms SLO; check the model server's queue and concurrency.")
            evidence = {
                "latency_p90_ms": ms(p90),
                "latency_p99_ms": ms(p99),
                "slo_p90_ms": slo.latency_p90_ms,
                "slo_p99_ms": slo.latency_p99_ms,
                "breached": list(breach.percentiles),
                "instance": node.id,
                "instance_type": node.instance_type,
                "endpoint_kind": "fleet",
                "requests": sig.get(node.id, "requests"),
                "window": window,
                "namespace": namespace,
                "metric": metric,
                "unit": slo.latency_unit,
            }
            findings.append(self.finding(node.id, summary, evidence, severity=breach.severity))
        return findings


def _worst(*breaches: LatencyBreach | None) -> LatencyBreach | None:
    found = [b for b in breaches if b is not None]
    if not found:
        return None
    severity = max((b.severity for b in found), key=lambda s: s.rank)
    percentiles = tuple(p for p in ("p90", "p99") if any(p in b.percentiles for b in found))
    return LatencyBreach(severity, percentiles)
