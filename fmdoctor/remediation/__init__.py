"""Safe remediation: plan -> pre-flight -> approve -> apply -> verify, every step in an audit log.

``plan_fix`` turns the fix hints of a check's current findings into exact API calls (read-only);
``preflight`` proves the permissions with EC2 DryRun; ``apply_fix`` runs an approved plan, re-runs the
check and reports whether the findings are gone. Nothing changes without an :class:`Approval` for the
exact plan (its digest), and approvals come only from front-end code that asked a person; see
:mod:`fmdoctor.remediation.approval` for the policy the LLM agent cannot talk its way past.
"""

from fmdoctor.remediation.actions import ACTIONS, ActionSpec, PlannedCall, RemediationError
from fmdoctor.remediation.apply import CallOutcome, FixResult, Verification, apply_fix, verify
from fmdoctor.remediation.approval import Approval, ApprovalRequired, refusal_reason
from fmdoctor.remediation.audit import AuditError, AuditLog, default_audit_path, record_decision
from fmdoctor.remediation.plan import FixPlan, plan_fix
from fmdoctor.remediation.preflight import PreflightCheck, PreflightResult, preflight

__all__ = [
    "ACTIONS",
    "ActionSpec",
    "Approval",
    "ApprovalRequired",
    "AuditError",
    "AuditLog",
    "CallOutcome",
    "FixPlan",
    "FixResult",
    "PlannedCall",
    "PreflightCheck",
    "PreflightResult",
    "RemediationError",
    "Verification",
    "apply_fix",
    "default_audit_path",
    "plan_fix",
    "preflight",
    "record_decision",
    "refusal_reason",
    "verify",
]
