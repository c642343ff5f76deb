"""Step 3, approve: the policy layer between a plan and AWS. Deny by default.

:func:`~fmdoctor.remediation.apply.apply_fix` refuses to run without an :class:`Approval` whose
``plan_digest`` equals the digest of the plan being applied (recomputed from the plan's content, so a
plan edited after approval no longer matches). Approvals are created only by front-end code that asked
a person: the terminal prompt or ``--yes`` of ``fmdoctor fix``, a Slack button from a configured approver,
an MCP elicitation. The LLM agent's tools may plan and pre-flight, never approve: a model's text is not a
person's consent, however it is phrased, and no tool turns text into an Approval. Every refusal is audited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.errors import FmdoctorError

if TYPE_CHECKING:
    from fmdoctor.remediation.plan import FixPlan


class ApprovalRequired(FmdoctorError):
    """apply_fix was called without a valid approval for this exact plan; nothing was changed."""


@dataclass(frozen=True)
class Approval:
    plan_digest: str
    approver: str  # who said yes: a local user, a Slack user id, an MCP client's user
    channel: str  # how: 'terminal', 'cli --yes', 'slack', 'mcp'
    granted_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @classmethod
    def grant(cls, plan: FixPlan, approver: str, channel: str) -> Approval:
        """For front-end approval code only, after a person confirmed this plan."""
        return cls(plan_digest=plan.digest, approver=approver, channel=channel)

    def to_json_dict(self) -> dict[str, Any]:
        return {"plan_digest": self.plan_digest, "approver": self.approver, "channel": self.channel,
                "granted_at": self.granted_at.isoformat()}


def refusal_reason(plan: FixPlan, approval: Approval | None) -> str | None:
    """Why ``approval`` does not authorise ``plan``, or ``None`` when it does."""
    if approval is None:
        return "no approval: a person must approve this plan first"
    if not isinstance(approval, Approval):
        return f"not an Approval ({type(approval).__name__})"
    if not approval.approver.strip() or not approval.channel.strip():
        return "the approval names no approver or channel"
    if approval.plan_digest != plan.digest:
        return (f"the approval is for plan {approval.plan_digest[:12]}, not this plan {plan.digest[:12]} "
                "(the plan changed since it was approved: plan and approve again)")
    return None
