"""Plain-text forms of a fix's plan, pre-flight and result, for the CLI and any chat front end.

Summaries and details carry AWS's own words (error messages, names): every line is shown through
:func:`fmdoctor.safety.text.visible`, so none of it can act on a terminal."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING

from fmdoctor.safety.text import visible

if TYPE_CHECKING:
    from fmdoctor.remediation import FixPlan, FixResult, PreflightResult

_PREFLIGHT_MARK = {"allowed": "✓", "denied": "✗", "failed": "✗", "not-checked": "?", "ignored-dry-run": "!"}
_OUTCOME_MARK = {"applied": "✓", "already-present": "=", "failed": "✗", "not-attempted": "-"}


def _shown(lines: Callable[..., list[str]]) -> Callable[..., list[str]]:
    @wraps(lines)
    def shown(*args: object) -> list[str]:
        return [visible(line, lines=False) for line in lines(*args)]

    return shown


@_shown
def plan_lines(plan: FixPlan) -> list[str]:
    account = f", account {plan.account}" if plan.account else ""
    scope = f" on {plan.resource}" if plan.resource else ""
    lines = [f"fmdoctor fix: {plan.check}{scope} in {plan.cluster} ({plan.region}{account})"]
    if plan.steps:
        lines.append(f"plan {plan.digest[:12]}: {len(plan.steps)} API call(s) for "
                     f"{len(plan.findings)} finding(s), in this order:")
        for number, step in enumerate(plan.steps, 1):
            lines.append(f"  {number}. {step.service} {step.operation}: {step.summary}")
            lines += ["       " + line for line in json.dumps(step.params, indent=2).splitlines()]
    for title, entries in (("already in place (skipped)", plan.satisfied), ("cannot be applied", plan.conflicts)):
        if entries:
            lines.append(f"{title}:")
            lines += [f"  - {e['call']['summary']}: {e['reason']}" for e in entries]
    if plan.manual:
        lines.append("no automated fix (follow the runbook):")
        lines += [f"  - {m['finding']}: fmdoctor runbook show {m['runbook']}" for m in plan.manual]
    if plan.notes:
        lines.append("notes:")
        lines += [f"  - {note}" for note in plan.notes]
    if not plan.steps and not plan.manual and not plan.conflicts:
        if plan.findings:
            lines.append(f"nothing left to apply, yet {plan.check} still raises {', '.join(plan.findings)}: every "
                         "planned change is already in place (AWS may be catching up; re-run the check)")
        else:
            lines.append(f"nothing to fix: {plan.check} raises no finding here")
    return lines


@_shown
def preflight_lines(result: PreflightResult) -> list[str]:
    lines = ["pre-flight (EC2 DryRun, nothing is changed):"]
    for number, check in enumerate(result.checks, 1):
        mark = _PREFLIGHT_MARK.get(check.status, "?")
        lines.append(f"  {mark} {number}. {check.call.operation}: {check.status}: {check.detail}")
    if result.note:
        lines.append(result.note)
    if result.denied_actions:
        lines.append(f"missing permission: {', '.join(result.denied_actions)} (see 'fmdoctor iam-policy "
                     "--remediation')")
    return lines


@_shown
def result_lines(result: FixResult) -> list[str]:
    lines = ["apply:"]
    for number, outcome in enumerate(result.outcomes, 1):
        mark = _OUTCOME_MARK.get(outcome.status, "?")
        detail = f": {outcome.detail}" if outcome.detail and outcome.status != "applied" else ""
        lines.append(f"  {mark} {number}. {outcome.call.operation} {outcome.status}: {outcome.call.summary}{detail}")
    applied = len(result.by_status("applied")) + len(result.by_status("already-present"))
    if result.failed:
        lines.append(f"stopped at the first failure: {applied} of {len(result.outcomes)} call(s) in place, "
                     f"{len(result.by_status('not-attempted'))} not attempted")
    verification = result.verification
    lines.append(f"verify: {verification.status}: {verification.detail}")
    return lines
