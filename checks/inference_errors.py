from __future__ import annotations

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference.assess import error_percentages
from fmdoctor.inference.signals import (
    DISCOVERY_ACTIONS,
    ENDPOINT_PARTS,
    serving_variants,
    signals_or_none,
    targets_or_skip,
)


class InferenceErrors(Check):
    """No serving endpoint variant failed more than inference.error_rate_percent of its invocations over
    the window, counting Invocation5XXErrors and InvocationModelErrors each as a share of Invocations.

    5XX errors are requests the endpoint could not answer; model errors are requests the container did
    not answer with a 2XX (exceptions, timeouts, crashes). Either above the threshold means users see
    failures now.
    """

    id = "inference-errors"
    family = "inference"
    severity = Severity.CRITICAL
    iam_actions = (*DISCOVERY_ACTIONS, "cloudwatch:GetMetricData")
    inventory = ENDPOINT_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        targets_or_skip(ctx, fleet=False)
        sig = signals_or_none(ctx, "error rates of the endpoints (CloudWatch GetMetricData)")
        if sig is None:
            return []
        threshold = ctx.settings.inference.error_rate_percent
        window = format_duration(ctx.settings.inference.window)
        findings = []
        for endpoint, variant in serving_variants(ctx):
            target = endpoint.variant_resource(variant)
            invocations = sig.get(target, "invocations")
            errors_5xx, model_errors = sig.get(target, "errors_5xx"), sig.get(target, "model_errors")
            rates = error_percentages(invocations, errors_5xx, model_errors)
            if rates is None or max(rates) <= threshold:
                continue
            rate_5xx, rate_model = rates
            kind = "5XX errors" if rate_5xx >= rate_model else "model errors"
            summary = (
                f"{max(rates):.1f}% of invocations of {endpoint.name}/{variant.name} failed with {kind} over "
                f"{window} (threshold {threshold:g}%); read the container logs in /aws/sagemaker/Endpoints/"
                f"{endpoint.name} and roll back a bad model."
            )
            evidence = {
                "error_rate_percent": round(max(rates), 2),
                "threshold_percent": threshold,
                "invocation_5xx_errors": int(errors_5xx or 0),
                "invocation_model_errors": int(model_errors or 0),
                "invocations": int(invocations or 0),
                "rate_5xx_percent": round(rate_5xx, 2),
                "rate_model_errors_percent": round(rate_model, 2),
                "endpoint": endpoint.name,
                "variant": variant.name,
                "window": window,
                "log_group": f"/aws/sagemaker/Endpoints/{endpoint.name}",
            }
            findings.append(self.finding(target, summary, evidence))
        return findings
