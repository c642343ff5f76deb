"""Fixes as the TUI shows and runs them: one view of a plan, whoever proposed it (the assistant or the user).

The calls, the dry run and the approval all come from :mod:`fmdoctor.remediation` (the same library
``fmdoctor fix`` uses); this module only shapes them for the approval modal and creates the
:class:`~fmdoctor.remediation.approval.Approval` after a person pressed Approve in it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.engine.api import Doctor
from fmdoctor.engine.model import Finding
from fmdoctor.remediation.apply import DEFAULT_VERIFY_DELAYS, FixResult, apply_fix
from fmdoctor.remediation.approval import Approval
from fmdoctor.remediation.audit import AuditLog, local_user, plan_fields, who
from fmdoctor.remediation.plan import FixPlan, plan_fix
from fmdoctor.remediation.preflight import preflight
from fmdoctor.report.fix import plan_lines, result_lines
from fmdoctor.report.markdown import code_span
from fmdoctor.safety.text import visible

CHANNEL = "tui"
_MARK = {"allowed": "✓", "denied": "✗", "failed": "✗", "not-checked": "?", "ignored-dry-run": "!"}


@dataclass(frozen=True)
class ProposedFix:
    """What the approval modal shows: the exact calls, the dry run, and the digest an approval must name."""

    target: str  # check/resource
    digest: str
    calls: tuple[dict[str, Any], ...]
    preflight: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    plan: FixPlan | None = field(default=None, compare=False)  # set when the user asked for the fix
    request: Any = field(default=None, compare=False)  # the assistant's ApprovalRequest otherwise

    @property
    def dry_run_ok(self) -> bool:
        return bool(self.preflight and self.preflight.get("passed", self.preflight.get("ok")))

    @classmethod
    def from_request(cls, request: Any) -> ProposedFix:
        target = f"{request.check_id}/{request.resource}" if request.resource else request.check_id
        preflight = request.preflight if isinstance(request.preflight, dict) else None
        return cls(target, request.plan_digest, tuple(request.calls()), preflight, request=request)

    @classmethod
    def from_plan(cls, plan: FixPlan, checked: Any) -> ProposedFix:
        target = f"{plan.check}/{plan.resource}" if plan.resource else plan.check
        notes = tuple(line for line in plan_lines(plan) if not plan.steps)
        return cls(target, plan.digest, tuple(plan.calls), checked.to_json_dict() if checked else None, notes,
                   plan=plan)

    def markdown(self) -> str:
        """The exact calls (scrolls when long); the dry run is :meth:`dry_run_text`, shown beside the buttons."""
        lines = [f"**Plan** `{self.digest[:12]}` to fix {code_span(self.target)}", ""]
        for number, call in enumerate(self.calls, 1):
            summary = f": {visible(call['summary'], lines=False)}" if call.get("summary") else ""
            lines += [f"{number}. `{call.get('service')}.{call.get('operation')}`{summary}", "",
                      "```json", json.dumps(call.get("params"), indent=2, sort_keys=True), "```", ""]
        lines += [visible(note, lines=False) for note in self.notes]
        return "\n".join(lines).rstrip()

    def dry_run_text(self) -> str:
        """The dry run in a few plain lines: the verdict first of all, then what each call would do."""
        if not self.preflight:
            return "Dry run: none was made (nothing was checked)"
        checks = self.preflight.get("checks") or []
        verdict = ("every call would succeed" if self.preflight.get("ok") else
                   "nothing is known to fail" if self.preflight.get("passed") else "THIS WOULD FAIL")
        lines = [f"Dry run (nothing is changed): {verdict}"]
        for check in checks:
            mark = _MARK.get(check.get("status"), "?")
            detail = f": {visible(check['detail'], lines=False)}" if check.get("detail") else ""
            lines.append(f"  {mark} {(check.get('call') or {}).get('operation')} {check.get('status')}{detail}")
        denied = self.preflight.get("denied_actions") or []
        if denied:
            lines.append(f"  missing permission: {', '.join(denied)}")
        if self.preflight.get("note"):
            lines.append(f"  {visible(self.preflight['note'], lines=False)}")
        return "\n".join(lines)


def approve(fix: ProposedFix) -> Approval:
    """Only called after a person pressed Approve for exactly this plan."""
    return Approval(plan_digest=fix.digest, approver=local_user(), channel=CHANNEL)


def propose(doctor: Doctor, cluster: str, check_id: str, resource: str | None, audit: AuditLog) -> ProposedFix:
    """Plan the fix of one finding and prove its permissions with a dry run (both audited, nothing changes)."""
    plan = plan_fix(doctor, cluster, check_id, resource=resource, audit=audit)
    checked = preflight(doctor, plan, audit=audit) if plan.steps else None
    return ProposedFix.from_plan(plan, checked)


def apply(doctor: Doctor, fix: ProposedFix, audit: AuditLog,
          verify_delays: Sequence[float] = DEFAULT_VERIFY_DELAYS) -> tuple[FixResult, str]:
    """Apply a plan the person approved, re-run its check, and say what happened in Markdown."""
    assert fix.plan is not None, "only a plan the user asked for is applied here"
    result = apply_fix(doctor, fix.plan, approve(fix), audit=audit, verify_delays=verify_delays)
    # one list item per line, not a code block: a fence keeps long lines whole (scrolling sideways in a narrow
    # chat pane); an item wraps to the pane and its values stay code spans
    text = "\n".join([*(f"- {code_span(line)}" for line in result_lines(result) if line.strip()),
                      "", f"audit log: {code_span(audit.path)}"])
    return result, text


def has_fix(finding: Finding) -> bool:
    """Whether fmdoctor can fix it (the check proposed calls in ``evidence.fix``); the others have a runbook."""
    return bool(finding.evidence.get("fix"))


def decline(fix: ProposedFix, audit: AuditLog) -> None:
    if fix.plan is not None:
        audit.record("declined", **plan_fields(fix.plan), who=who(fix.plan.identity), outcome="declined",
                     approver=local_user(), channel=CHANNEL)
