"""What the assistant hands front ends: streamed events, the final answer and approval requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fmdoctor.assistant.session import PendingPlan, ToolCallRecord
from fmdoctor.report.fix import call_lines


@dataclass(frozen=True)
class ApprovalRequest:
    """A fix waiting for a person. Show ``plan`` (the exact API calls and arguments) and ``preflight`` (the
    dry run), then call ``Assistant.resume(session_id, approval)`` with an ``Approval`` for
    ``plan_digest`` on yes, or ``None`` on no."""

    session_id: str
    interrupt_id: str
    tool_call_id: str
    plan_digest: str
    check_id: str
    resource: str | None
    plan: Any
    preflight: Any = None

    @classmethod
    def of(cls, session_id: str, interrupt_id: str, tool_call_id: str, pending: PendingPlan) -> ApprovalRequest:
        data = pending.to_json_dict()
        return cls(session_id, interrupt_id, tool_call_id, pending.digest, pending.check_id, pending.resource,
                   data["plan"], data["preflight"])

    def calls(self) -> list[dict[str, Any]]:
        return list(self.plan.get("calls") or []) if isinstance(self.plan, dict) else []

    def describe(self) -> str:
        """The plan as ``fmdoctor fix`` lists its calls (parameters as JSON), then the dry run's verdict."""
        target = f"{self.check_id}/{self.resource}" if self.resource else self.check_id
        lines = [f"Plan {self.plan_digest} to fix {target}:", *call_lines(self.calls())]
        if self.preflight is not None:
            lines.append(f"Dry run: {_dry_run(self.preflight)}")
        return "\n".join(lines)

    def to_json_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "plan_digest": self.plan_digest, "check_id": self.check_id,
                "resource": self.resource, "plan": self.plan, "preflight": self.preflight}


def _dry_run(preflight: Any) -> str:
    if isinstance(preflight, dict) and preflight.get("ok") is None and preflight.get("passed"):
        return str(preflight.get("note") or "no dry run exists for some calls")
    if isinstance(preflight, dict) and isinstance(preflight.get("ok"), bool):
        if preflight["ok"]:
            return "every call would succeed"
        denied = ", ".join(preflight.get("denied_actions") or []) or "see the plan"
        return f"would fail: denied {denied}"
    return str(preflight)


@dataclass
class AssistantAnswer:
    answer: str
    session_id: str
    model: str
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    checks_run: list[str] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)  # finding ids from tool output the answer cites
    unverified_citations: list[str] = field(default_factory=list)  # finding-id-like text no tool returned
    approval: ApprovalRequest | None = None
    # tokens of this question's model calls: input_tokens, output_tokens, total_tokens, model_calls and source
    # (provider: the provider's numbers; estimate: 4 characters a token; mixed; none: no model call)
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def approval_required(self) -> bool:
        return self.approval is not None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "tool_calls": [c.to_json_dict() for c in self.tool_calls],
            "findings": self.findings,
            "errors": self.errors,
            "checks_run": self.checks_run,
            "citations": self.citations,
            "unverified_citations": self.unverified_citations,
            "approval_required": self.approval.to_json_dict() if self.approval else None,
            "session_id": self.session_id,
            "model": self.model,
            "usage": self.usage,
        }


@dataclass(frozen=True)
class ToolStarted:
    call_id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ToolFinished:
    call_id: str
    name: str
    args: dict[str, Any]
    status: str  # success | error | no_data | approval_required | refused
    duration_s: float
    finding_count: int
    message: str = ""


@dataclass(frozen=True)
class CheckProgress:
    check_id: str
    phase: str  # started | finished
    findings: int = 0
    done: int = 0
    total: int = 0


@dataclass(frozen=True)
class AnswerToken:
    text: str


@dataclass(frozen=True)
class ApprovalNeeded:
    request: ApprovalRequest


@dataclass(frozen=True)
class TurnFinished:
    answer: AssistantAnswer


AssistantEvent = ToolStarted | ToolFinished | CheckProgress | AnswerToken | ApprovalNeeded | TurnFinished
