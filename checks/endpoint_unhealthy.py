from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.endpoint_details import InferenceComponent
from fmdoctor.engine.endpoints import Endpoint
from fmdoctor.engine.entities import ENDPOINT
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.inference.signals import DISCOVERY_ACTIONS, ENDPOINT_PARTS, targets_or_skip

BROKEN = frozenset({"Failed", "OutOfService", "UpdateRollbackFailed"})
TRANSITIONAL = frozenset({"Creating", "Updating", "SystemUpdating", "RollingBack"})
REASON_IN_SUMMARY = 160


class EndpointUnhealthy(Check):
    """Every SageMaker endpoint of the target is InService, none is stuck creating or updating beyond
    inference.stuck_after, and none reports a failed (rolled-back) update; every inference component it
    hosts is InService with all its desired copies placed (or got them within inference.stuck_after).

    A Failed or OutOfService endpoint answers no requests; an UpdateRollbackFailed one serves a mix of
    old and new configs; one stuck in Updating cannot be changed or scaled until it settles. A Failed
    inference component serves nothing; one with fewer copies than it wants has no room left on the
    endpoint's instances for the rest (DescribeInferenceComponent's RuntimeConfig: CurrentCopyCount,
    DesiredCopyCount; docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeInferenceComponent.html).
    """

    id = "endpoint-unhealthy"
    family = "inference"
    concerns = frozenset({ENDPOINT})
    severity = Severity.CRITICAL
    iam_actions = DISCOVERY_ACTIONS
    inventory = ENDPOINT_PARTS

    def run(self, ctx: CheckContext) -> list[Finding]:
        targets_or_skip(ctx, fleet=False)
        stuck_after = ctx.settings.inference.stuck_after
        findings = []
        for endpoint in ctx.inventory.endpoints:
            age, evidence = _status(ctx, endpoint.status, endpoint.failure_reason,
                                    endpoint.last_modified or endpoint.created)
            evidence |= {
                "endpoint_config": endpoint.config_name,
                "endpoint": endpoint.name,
                "endpoint_arn": endpoint.arn,
            }
            if endpoint.status in BROKEN:
                findings.append(self.finding(endpoint.resource, _broken_summary(endpoint), evidence))
            elif endpoint.status in TRANSITIONAL and age is not None and age > stuck_after:
                summary = (
                    f"SageMaker endpoint {endpoint.name} has been {endpoint.status} for {format_duration(age)} "
                    f"(over {format_duration(stuck_after)}); read its CloudWatch logs and roll back to the "
                    "last good endpoint config."
                )
                findings.append(self.finding(endpoint.resource, summary, evidence))
            elif endpoint.status == "InService" and endpoint.failure_reason:
                summary = (
                    f"SageMaker endpoint {endpoint.name} is InService but its last update failed and was rolled "
                    f"back ({_short(endpoint.failure_reason)}); fix the new config before deploying it again."
                )
                findings.append(self.finding(endpoint.resource, summary, evidence, severity=Severity.WARNING))
            findings += [f for c in endpoint.components if (f := self._component(ctx, endpoint, c))]
        return findings

    def _component(self, ctx: CheckContext, endpoint: Endpoint, component: InferenceComponent) -> Finding | None:
        stuck_after = ctx.settings.inference.stuck_after
        age, evidence = _status(ctx, component.status, component.failure_reason,
                                component.last_modified or component.created)
        evidence |= {
            "current_copies": component.current_copies,
            "desired_copies": component.desired_copies,
            "endpoint_config": endpoint.config_name,
            "endpoint": endpoint.name,
            "inference_component": component.name,
            "endpoint_arn": endpoint.arn,
        }
        who = f"Inference component {component.name} on endpoint {endpoint.name}"
        settled = age is not None and age > stuck_after
        if component.status == "Failed":
            reason = f" ({_short(component.failure_reason)})" if component.failure_reason else ""
            summary = f"{who} is Failed and serves no requests{reason}; fix the cause and deploy it again."
            return self.finding(component.resource, summary, evidence)
        if component.status in ("Creating", "Updating") and settled and age is not None:
            summary = (f"{who} has been {component.status} for {format_duration(age)} (over "
                       f"{format_duration(stuck_after)}); read /aws/sagemaker/InferenceComponents/{component.name}.")
            return self.finding(component.resource, summary, evidence)
        if component.status == "InService" and component.current_copies < component.desired_copies and settled:
            summary = (f"{who} runs {component.current_copies} of its {component.desired_copies} copies: the "
                       "endpoint's instances have no room for the rest; add instances (or enable managed instance "
                       "scaling) or lower the copies' resource requirements.")
            return self.finding(component.resource, summary, evidence, severity=Severity.WARNING)
        return None


def _status(ctx: CheckContext, status: str, failure_reason: str | None, since: datetime | None
            ) -> tuple[timedelta | None, dict[str, Any]]:
    """How long a resource has been in its status, and the evidence every status finding carries."""
    age = ctx.now - since if since else None
    return age, {
        "status": status,
        "failure_reason": failure_reason,
        "in_status_for": format_duration(age) if age is not None else None,
        "stuck_after": format_duration(ctx.settings.inference.stuck_after),
        "status_since": _iso(since),
    }


def _broken_summary(endpoint: Endpoint) -> str:
    reason = f" ({_short(endpoint.failure_reason)})" if endpoint.failure_reason else ""
    if endpoint.status == "UpdateRollbackFailed":
        return (f"SageMaker endpoint {endpoint.name} failed to update and to roll back{reason}, so it serves a mix of "
                "old and new configs; update it to one known-good endpoint config.")
    return (f"SageMaker endpoint {endpoint.name} is {endpoint.status} and serves no requests{reason}; fix the cause, "
            "then redeploy its last good endpoint config.")


def _short(reason: str | None) -> str:
    text = " ".join((reason or "").split())
    return text if len(text) <= REASON_IN_SUMMARY else text[: REASON_IN_SUMMARY - 1] + "…"


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
