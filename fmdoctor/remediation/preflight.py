"""Step 2, pre-flight: prove each call is permitted without changing anything.

EC2 calls run with ``DryRun=True``: ``DryRunOperation`` means the caller has the permission,
``UnauthorizedOperation`` names the action it lacks. APIs without DryRun (SageMaker's Batch*ClusterNodes)
are reported as not checked rather than assumed allowed: a pre-flight is ``ok`` (true) only when every call
was proven; with a call AWS cannot dry-run it says so (``ok`` null, ``note``) and only ``passed`` (nothing
known to fail) lets the front ends ask for approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore import xform_name
from botocore.exceptions import ClientError

from fmdoctor.engine.aws import Aws
from fmdoctor.engine.errors import ACCESS_DENIED_CODES, describe_aws_failure
from fmdoctor.remediation.actions import SCHEDULER_SERVICES, CallStatus, PlannedCall, RemediationError, spec_for
from fmdoctor.remediation.audit import AuditLog, audit_log_for, caller_identity, plan_fields, who
from fmdoctor.remediation.plan import FixPlan

if TYPE_CHECKING:  # a Doctor is passed in; importing the engine's front door here would close a circle
    from fmdoctor.engine.api import Doctor

ALLOWED = "allowed"  # DryRunOperation: the permission is proven
DENIED = "denied"  # the caller lacks the IAM action
FAILED = "failed"  # another error (the resource is gone, a bad parameter...)
NOT_CHECKED = "not-checked"  # the API has no DryRun
IGNORED_DRY_RUN = "ignored-dry-run"  # the endpoint applied the call despite DryRun=True


PreflightCheck = CallStatus


@dataclass(frozen=True)
class PreflightResult:
    plan_digest: str
    checks: tuple[PreflightCheck, ...]

    @property
    def passed(self) -> bool:
        """Nothing is known to fail (calls without DryRun are not held against it): a person may be asked."""
        return all(c.status in (ALLOWED, NOT_CHECKED) for c in self.checks)

    @property
    def ok(self) -> bool | None:
        """True: every call proven by DryRun; False: one would fail; None: nothing known to fail, but some call
        has no DryRun, so its permission is proven only when it runs."""
        if not self.passed:
            return False
        return None if self.not_checked else True

    @property
    def not_checked(self) -> list[str]:
        return [c.call.iam_action for c in self.checks if c.status == NOT_CHECKED]

    @property
    def note(self) -> str:
        if not self.not_checked:
            return ""
        return (f"no dry run exists for {', '.join(sorted(set(self.not_checked)))}: AWS offers none, so its "
                "permission and effect are proven only when it runs")

    @property
    def denied_actions(self) -> list[str]:
        return sorted({c.iam_action or c.call.iam_action for c in self.checks if c.status == DENIED})

    def to_json_dict(self) -> dict[str, Any]:
        return {"plan_digest": self.plan_digest, "ok": self.ok, "passed": self.passed,
                "denied_actions": self.denied_actions, "not_checked": self.not_checked, "note": self.note,
                "checks": [c.to_json_dict() for c in self.checks]}


def connect_for(doctor: Doctor, plan: FixPlan) -> Aws:
    """A session for the plan's target; refuses one pointed at another region than the plan was made for."""
    aws = doctor.connect(doctor.cluster_settings(plan.cluster))
    if aws.region != plan.region:
        raise RemediationError(f"the plan is for {plan.region}, but this connection is to {aws.region}")
    return aws


def preflight(doctor: Doctor, plan: FixPlan, audit: AuditLog | None = None) -> PreflightResult:
    aws = connect_for(doctor, plan)
    checks = tuple(_dry_run(aws, step) for step in plan.steps)
    result = PreflightResult(plan.digest, checks)
    outcome = ("ok" if result.ok else "no dry run" if result.passed else
               "denied: " + ", ".join(result.denied_actions) if result.denied_actions else "failed")
    audit_log_for(doctor, audit).record("preflight", **plan_fields(plan), who=who(caller_identity(aws)),
                                        outcome=outcome, results=[c.to_json_dict() for c in checks])
    return result


def _dry_run(aws: Aws, call: PlannedCall) -> PreflightCheck:
    if spec_for(call).service in SCHEDULER_SERVICES:
        return PreflightCheck(call, NOT_CHECKED, f"{call.service} has no dry run: the change is proven by reading the "
                                                 "node back from the scheduler after it runs")
    if not spec_for(call).dry_run:
        return PreflightCheck(call, NOT_CHECKED, f"{call.operation} has no DryRun: its permission is proven "
                                                 "only when it runs")
    method = getattr(aws.client(call.service), xform_name(call.operation))
    try:
        method(**call.params, DryRun=True)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "DryRunOperation":
            return PreflightCheck(call, ALLOWED, "DryRun: the request would have succeeded", code)
        failure = describe_aws_failure(exc)
        message = failure.message if failure else str(exc)
        if code in ACCESS_DENIED_CODES:
            action = call.iam_action
            return PreflightCheck(call, DENIED, f"not permitted: grant {action} ({_short(message)})", code, action)
        return PreflightCheck(call, FAILED, f"{code}: {_short(message)}", code)
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        return PreflightCheck(call, FAILED, f"{failure.code}: {_short(failure.message)}", failure.code)
    return PreflightCheck(call, IGNORED_DRY_RUN, "the endpoint ignored DryRun=True: this call may already have "
                                                 "been applied")


def _short(message: str, limit: int = 240) -> str:
    # EC2 appends a long 'Encoded authorization failure message'; the action and code are what matter.
    message = message.split(" Encoded authorization failure message:")[0]
    return message if len(message) <= limit else message[: limit - 1] + "…"
