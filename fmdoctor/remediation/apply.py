"""Steps 4 and 5, apply and verify: run the approved calls in order, then re-run the check.

Only an approved plan runs (see :mod:`fmdoctor.remediation.approval`). "Already exists" answers count
as done, so a repeated fix is a no-op. The first failure stops the run: the result says which calls were
applied, which failed and which were not attempted, and the check is re-run either way so the report says
what the cluster looks like now. Every step is audited before the next one starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore import xform_name
from botocore.exceptions import ClientError

from fmdoctor.engine.aws import Aws
from fmdoctor.engine.errors import describe_aws_failure
from fmdoctor.remediation.actions import SCHEDULER_SERVICES, CallStatus, PlannedCall, RemediationError, spec_for
from fmdoctor.remediation.approval import Approval, ApprovalRequired, refusal_reason
from fmdoctor.remediation.audit import AuditError, AuditLog, audit_log_for, caller_identity, plan_fields, who
from fmdoctor.remediation.current import reconcile
from fmdoctor.remediation.plan import FixPlan
from fmdoctor.remediation.preflight import connect_for
from fmdoctor.words import plural

if TYPE_CHECKING:  # a Doctor is passed in; importing the engine's front door here would close a circle
    from fmdoctor.engine.api import Doctor

APPLIED = "applied"
ALREADY = "already-present"
FAILED = "failed"
NOT_ATTEMPTED = "not-attempted"

VERIFIED = "verified"  # the findings are gone
STILL_PRESENT = "still-present"
PENDING = "pending"  # an asynchronous action (HyperPod reboot/replace) is under way
UNVERIFIED = "unverified"  # the check could not run

DEFAULT_VERIFY_DELAYS = (2.0, 5.0)  # EC2 describes are eventually consistent for a few seconds


CallOutcome = CallStatus


@dataclass(frozen=True)
class Verification:
    status: str
    remaining: tuple[str, ...] = ()
    detail: str = ""

    def to_json_dict(self) -> dict[str, Any]:
        return {"status": self.status, "remaining": list(self.remaining), "detail": self.detail}


@dataclass(frozen=True)
class FixResult:
    plan: FixPlan
    approval: Approval
    outcomes: tuple[CallOutcome, ...]
    verification: Verification
    api_calls: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(o.status == FAILED for o in self.outcomes)

    @property
    def verified(self) -> bool:
        return self.verification.status == VERIFIED

    @property
    def ok(self) -> bool:
        return self.verified and not self.failed

    def by_status(self, status: str) -> list[CallOutcome]:
        return [o for o in self.outcomes if o.status == status]

    def to_json_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "plan_digest": self.plan.digest, "approval": self.approval.to_json_dict(),
                "outcomes": [o.to_json_dict() for o in self.outcomes],
                "verification": self.verification.to_json_dict(), "api_calls": self.api_calls}


def apply_fix(
    doctor: Doctor,
    plan: FixPlan,
    approval: Approval | None,
    audit: AuditLog | None = None,
    verify_delays: Sequence[float] = DEFAULT_VERIFY_DELAYS,
    sleep: Callable[[float], None] = time.sleep,
) -> FixResult:
    """Apply an approved plan and verify it; raises :class:`ApprovalRequired` (audited) without approval."""
    log = audit_log_for(doctor, audit)
    reason = refusal_reason(plan, approval)
    if reason is not None:
        log.record("approval-refused", **plan_fields(plan), who=who(None), outcome="refused", reason=reason)
        raise ApprovalRequired(f"refusing to apply the fix: {reason}")
    assert approval is not None
    aws = connect_for(doctor, plan)
    identity = caller_identity(aws)
    if plan.account and identity.get("account") and identity["account"] != plan.account:
        raise RemediationError(f"the plan is for account {plan.account}, but these credentials are for "
                               f"{identity['account']}")
    actor = who(identity)
    # The approval and the intent (the exact calls, in plan_fields) are on disk before the first call; if they
    # cannot be written, AuditError stops here and nothing is applied.
    log.record("approval", **plan_fields(plan), who=actor, outcome="granted", approval=approval.to_json_dict(),
               intent=f"apply {len(plan.steps)} call(s) in order")

    outcomes: list[CallOutcome] = []
    completed = False
    try:
        for step in plan.steps:
            outcomes.append(_apply_scheduler(doctor, plan, step) if spec_for(step).service in SCHEDULER_SERVICES
                            else _apply_one(aws, step))
            if outcomes[-1].status == FAILED:
                break
        completed = True
    finally:  # also on Ctrl-C: the log says what was applied before it stopped
        outcomes += [CallOutcome(s, NOT_ATTEMPTED) for s in plan.steps[len(outcomes):]]
        failed = any(o.status == FAILED for o in outcomes)
        _record_after_the_fact(log, "apply", outcomes, **plan_fields(plan), who=actor,
                               outcome=FAILED if failed else APPLIED if completed else "interrupted",
                               results=[o.to_json_dict() for o in outcomes])

    verification = verify(doctor, plan, verify_delays if not failed else (), sleep, applied=not failed)
    _record_after_the_fact(log, "verify", outcomes, **plan_fields(plan), who=actor, outcome=verification.status,
                           remaining=list(verification.remaining), detail=verification.detail)
    return FixResult(plan, approval, tuple(outcomes), verification, aws.calls.snapshot())


def _record_after_the_fact(log: AuditLog, event: str, outcomes: Sequence[CallOutcome], **fields: Any) -> None:
    """A record of what already happened in AWS: when it cannot be written, say exactly what was done."""
    try:
        log.record(event, **fields)
    except AuditError as exc:
        done = [f"{o.call.operation} {o.status}" for o in outcomes if o.status in (APPLIED, ALREADY, FAILED)]
        raise AuditError(f"{exc.message}; AWS was already changed: {', '.join(done) or 'no call succeeded'}",
                         hint="record this change by hand, then fix the audit log") from None


def _apply_scheduler(doctor: Doctor, plan: FixPlan, step: PlannedCall) -> CallOutcome:
    """A node change through the cluster's scheduler (its config section), applied only once the scheduler
    reads it back (fmdoctor.scheduler.changes)."""
    from fmdoctor.scheduler.changes import change_node

    result = change_node(doctor.cluster_settings(plan.cluster).scheduler, step.service, step.params)
    return CallOutcome(step, result.status, result.detail, result.code)


def _apply_one(aws: Aws, step: PlannedCall) -> CallOutcome:
    spec = spec_for(step)
    try:
        response = getattr(aws.client(step.service), xform_name(step.operation))(**step.params)
    except ClientError as exc:
        failure = describe_aws_failure(exc)
        code = failure.code if failure else str(exc)
        if code in spec.duplicate_codes:
            return _already_or_conflict(aws, step, code)
        action = failure.iam_action if failure and failure.kind == "access-denied" else None
        return CallOutcome(step, FAILED, failure.message if failure else str(exc), code, action or None)
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        return CallOutcome(step, FAILED, failure.message, failure.code)
    return _batch_outcome(step, response, spec.duplicate_codes)


def _already_or_conflict(aws: Aws, step: PlannedCall, code: str) -> CallOutcome:
    """An "already exists" answer: the same change (done) or a different one in its place (a conflict)."""
    if step.operation not in ("CreateNetworkAclEntry", "CreateRoute"):
        return CallOutcome(step, ALREADY, f"{code}: already in place", code)
    state = reconcile(aws, [step])
    if state.satisfied:
        return CallOutcome(step, ALREADY, state.satisfied[0][1], code)
    reason = state.conflicts[0][1] if state.conflicts else f"{code}: something different is already in its place"
    return CallOutcome(step, FAILED, reason, code)


def _batch_outcome(step: PlannedCall, response: dict[str, Any], busy_codes: frozenset[str]) -> CallOutcome:
    """SageMaker's Batch*ClusterNodes answer 200 with per-node failures; any real failure fails the call."""
    failures = [f for f in response.get("Failed") or [] if f.get("ErrorCode") not in busy_codes]
    busy = [f.get("NodeId") for f in response.get("Failed") or [] if f.get("ErrorCode") in busy_codes]
    if failures:
        text = "; ".join(f"{f.get('NodeId')}: {f.get('ErrorCode')}: {f.get('Message', '')}".strip() for f in failures)
        ok = response.get("Successful") or []
        return CallOutcome(step, FAILED, f"{plural(len(ok), 'node')} accepted, {len(failures)} failed: {text}",
                           failures[0].get("ErrorCode"))
    if busy and not response.get("Successful"):
        return CallOutcome(step, ALREADY, f"already in progress on {', '.join(map(str, busy))}", "InstanceIdInUse")
    return CallOutcome(step, APPLIED, step.summary)


def verify(doctor: Doctor, plan: FixPlan, delays: Sequence[float] = DEFAULT_VERIFY_DELAYS,
           sleep: Callable[[float], None] = time.sleep, applied: bool = True) -> Verification:
    """Re-run the check that raised the findings; retry briefly, because EC2 reads lag writes.

    ``applied`` False (a call failed): no asynchronous change is under way, so what is still raised is still
    present, never "pending"."""
    attempts = [0.0] if plan.asynchronous else [0.0, *delays]
    remaining: tuple[str, ...] = ()
    for delay in attempts:
        if delay:
            sleep(delay)
        report = doctor.check(plan.cluster, only=[plan.check])
        errors = [e for e in report.errors if e.check in (plan.check, "inventory")]
        if errors:
            e = errors[0]
            return Verification(UNVERIFIED, plan.findings, f"{plan.check} could not run: {e.code}: {e.unverified}")
        raised = {f.id for f in report.findings_for(plan.check)}
        remaining = tuple(f for f in plan.findings if f in raised)
        if not remaining:
            return Verification(VERIFIED, (), f"{plan.check} no longer raises {', '.join(plan.findings) or 'it'}")
    if plan.asynchronous and applied:
        return Verification(PENDING, remaining, "HyperPod reboots and replaces nodes asynchronously; re-run "
                                                f"'fmdoctor check --only {plan.check}' in a few minutes")
    return Verification(STILL_PRESENT, remaining, f"{plan.check} still raises {', '.join(remaining)}")
