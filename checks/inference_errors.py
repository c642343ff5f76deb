from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import ENDPOINT, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference import kinds
from fmdoctor.inference.assess import error_rates
from fmdoctor.inference.signals import (
    DISCOVERY_ACTIONS,
    ENDPOINT_PARTS,
    Signals,
    serving_components,
    serving_variants,
    signals_or_none,
    targets_or_skip,
)


@dataclass(frozen=True)
class Counted:
    """The request count of a kind and its error counts: (signal, metric, evidence key[, rate key])."""

    requests: tuple[str, str, str]
    errors: tuple[tuple[str, str, str, str], ...]


INVOKED = Counted(("invocations", "Invocations", "invocations"), (
    ("errors_5xx", "Invocation5XXErrors", "invocation_5xx_errors", "rate_5xx_percent"),
    ("model_errors", "InvocationModelErrors", "invocation_model_errors", "rate_model_errors_percent"),
))
PROCESSED = Counted(("processed", "InvocationsProcessed", "invocations_processed"), (
    ("failures", "InvocationFailures", "invocation_failures", "rate_failures_percent"),
))


class InferenceErrors(Check):
    """No serving endpoint variant or inference component failed more than inference.error_rate_percent of
    its requests over the window: Invocation5XXErrors and InvocationModelErrors each as a share of Invocations
    (real-time, serverless, per inference component), InvocationFailures as a share of InvocationsProcessed
    (asynchronous endpoints, which publish no Invocations).

    5XX errors are requests the endpoint could not answer; model errors are requests the container did not
    answer with a 2XX (exceptions, timeouts, crashes); an async InvocationFailure is a queued request that
    failed for any reason. The denominator is the request count SageMaker publishes for the kind
    (docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html, async-inference-monitor.html), never
    the error count: errors without it are reported as not verified.
    """

    id = "inference-errors"
    family = "inference"
    concerns = frozenset({ENDPOINT, NODE})
    severity = Severity.CRITICAL
    iam_actions = (*DISCOVERY_ACTIONS, "cloudwatch:GetMetricData")
    inventory = ENDPOINT_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        targets_or_skip(ctx, fleet=False)
        sig = signals_or_none(ctx, "error rates of the endpoints (CloudWatch GetMetricData)")
        if sig is None:
            return []
        findings = []
        for endpoint, variant in serving_variants(ctx):
            kind = kinds.kind_of(endpoint, variant)
            if kind == kinds.COMPONENTS:
                continue  # judged per component below
            identity = {"endpoint": endpoint.name, "variant": variant.name, "endpoint_kind": kind}
            findings += self._judge(ctx, sig, endpoint.variant_resource(variant), f"{endpoint.name}/{variant.name}",
                                    PROCESSED if kind == kinds.ASYNC else INVOKED, identity,
                                    f"/aws/sagemaker/Endpoints/{endpoint.name}")
        for endpoint, component in serving_components(ctx):
            identity = {"endpoint": endpoint.name, "inference_component": component.name,
                        "endpoint_kind": kinds.COMPONENTS}
            findings += self._judge(ctx, sig, component.resource, f"inference component {component.name}", INVOKED,
                                    identity, f"/aws/sagemaker/InferenceComponents/{component.name}")
        return findings

    def _judge(self, ctx: CheckContext, sig: Signals, target: str, who: str, counted: Counted,
               identity: dict[str, Any], log_group: str) -> list[Finding]:
        threshold = ctx.settings.inference.error_rate_percent
        window = format_duration(ctx.settings.inference.window)
        signal, metric, key = counted.requests
        requests = sig.get(target, signal)
        counts = {e[1]: sig.get(target, e[0]) for e in counted.errors}
        rates = error_rates(requests, counts)
        if rates is None:
            if any(counts.values()):
                failed = " and ".join(f"{int(c or 0)} {m}" for m, c in counts.items() if c)
                ctx.unverified(f"error rate of {who}", "NoData",
                               f"{failed} over {window} but no {metric} datapoints to divide them by")
            return []
        worst = max(rates, key=lambda m: rates[m])
        if rates[worst] <= threshold:
            return []
        summary = (
            f"{rates[worst]:.1f}% of the {int(requests or 0)} {metric} of {who} failed ({worst}) over {window} "
            f"(threshold {threshold:g}%); read the container logs in {log_group} and roll back a bad model."
        )
        evidence = {
            "error_rate_percent": round(rates[worst], 2),
            "threshold_percent": threshold,
            "requests_metric": metric,
            key: int(requests or 0),
            **{count_key: int(counts[m] or 0) for _, m, count_key, _ in counted.errors},
            **{rate_key: round(rates[m], 2) for _, m, _, rate_key in counted.errors},
            "worst_metric": worst,
            **identity,
            "window": window,
            "log_group": log_group,
        }
        return [self.finding(target, summary, evidence)]
