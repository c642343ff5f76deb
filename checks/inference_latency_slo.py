from __future__ import annotations

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference.assess import LatencyBreach, VariantLatency, latency_breach, ms
from fmdoctor.inference.signals import (
    FLEET_PARTS,
    SIGNAL_ACTIONS,
    Signals,
    latency_metric_unpublished,
    latency_ms,
    serving_variants,
    signals_or_none,
    targets_or_skip,
)


class InferenceLatencySlo(Check):
    """The p90 and p99 latency of every serving endpoint variant (ModelLatency, and SageMaker's own
    OverheadLatency) and of every inference fleet node (inference.latency_metric) over the window are
    within inference.latency_p90_ms and latency_p99_ms.

    A p90 over the SLO (one request in ten too slow) is critical, a p99 alone a warning. OverheadLatency
    is reported beside ModelLatency so the summary says whether the model or the platform is slow.
    """

    id = "inference-latency-slo"
    family = "inference"
    severity = Severity.WARNING
    iam_actions = SIGNAL_ACTIONS
    inventory = FLEET_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        targets_or_skip(ctx)
        sig = signals_or_none(ctx, "latency of the endpoints and fleet nodes (CloudWatch GetMetricData)")
        if sig is None:
            return []
        slo = ctx.settings.inference
        window = format_duration(slo.window)
        findings = []
        for endpoint, variant in serving_variants(ctx):
            target = endpoint.variant_resource(variant)
            latency = VariantLatency.of(sig, target)
            model, overhead = latency.breach(ctx.settings), latency.overhead_breach(ctx.settings)
            breach = _worst(model, overhead)
            if breach is None:
                continue
            worst = "p90" if "p90" in breach.percentiles else "p99"
            model_value = latency.model_p90_ms if worst == "p90" else latency.model_p99_ms
            overhead_value = latency.overhead_p90_ms if worst == "p90" else latency.overhead_p99_ms
            limit = slo.latency_p90_ms if worst == "p90" else slo.latency_p99_ms
            platform_slow = (overhead_value or 0.0) > (model_value or 0.0)
            culprit = ("the time goes to SageMaker's overhead, not the model" if platform_slow
                       else "the time goes to the model container, not SageMaker's overhead")
            parts = f"model {ms(model_value)} ms" + (f", overhead {ms(overhead_value)} ms" if overhead_value else "")
            summary = (
                f"{worst} latency of {endpoint.name}/{variant.name} is "
                f"{ms(overhead_value if platform_slow else model_value)} ms over {window}, above the {limit:g} ms "
                f"SLO ({parts}): {culprit}."
            )
            evidence = {
                "model_latency_p90_ms": ms(latency.model_p90_ms),
                "model_latency_p99_ms": ms(latency.model_p99_ms),
                "slo_p90_ms": slo.latency_p90_ms,
                "slo_p99_ms": slo.latency_p99_ms,
                "overhead_latency_p90_ms": ms(latency.overhead_p90_ms),
                "overhead_latency_p99_ms": ms(latency.overhead_p99_ms),
                "breached": list(breach.percentiles),
                "slow_part": "platform" if platform_slow else "model",
                "endpoint": endpoint.name,
                "variant": variant.name,
                "instance_type": variant.instance_type,
                "instances": variant.current_instances,
                "window": window,
                "metrics": "AWS/SageMaker ModelLatency, OverheadLatency (microseconds, shown in ms)",
            }
            findings.append(self.finding(target, summary, evidence, severity=breach.severity))
        findings.extend(self._fleet(ctx, sig, window))
        return findings

    def _fleet(self, ctx: CheckContext, sig: Signals, window: str) -> list[Finding]:
        slo = ctx.settings.inference
        if not slo.latency_metric:
            return []
        unpublished = latency_metric_unpublished(ctx, sig)
        if unpublished:
            nodes = len(ctx.inventory.inference_nodes())
            ctx.unverified(f"latency of {nodes} inference node{'s' if nodes != 1 else ''}", "NoData", unpublished)
            return []
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
