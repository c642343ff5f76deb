"""Plain-text forms of a fix's plan, pre-flight and result, for the CLI and any chat front end.

Summaries and details carry AWS's own words (error messages, names): every line is shown through
:func:`fmdoctor.safety.text.visible`, so none of it can act on a terminal."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import wraps
from typing import TYPE_CHECKING, Any

from fmdoctor.safety.text import visible
from fmdoctor.words import plural

if TYPE_CHECKING:
    from fmdoctor.remediation.apply import FixResult
    from fmdoctor.remediation.plan import FixPlan
    from fmdoctor.remediation.preflight import PreflightResult

_PREFLIGHT_MARK = {"allowed": "✓", "denied": "✗", "failed": "✗", "not-checked": "?", "ignored-dry-run": "!"}
_OUTCOME_MARK = {"applied": "✓", "already-present": "=", "failed": "✗", "not-attempted": "-"}


def _shown(lines: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """Every line as a terminal may show it: account text with control and invisible characters escaped."""
    @wraps(lines)
    def shown(*args: object) -> list[str]:
        return [visible(line, lines=False) for line in lines(*args)]

    return shown


def _plain(value: Any) -> dict[str, Any]:
    """A plan or pre-flight, or its JSON form (what the assistant's approval request carries)."""
    return value.to_json_dict() if hasattr(value, "to_json_dict") else dict(value or {})


@_shown
def plan_lines(plan: FixPlan | Mapping[str, Any]) -> list[str]:
    """The plan as ``fmdoctor fix`` prints it: the target, then each exact call with its parameters."""
    p = _plain(plan)
    calls, findings = p.get("calls") or [], p.get("findings") or []
    manual, unverified = p.get("manual") or [], p.get("unverified") or []
    account = f", account {p['account']}" if p.get("account") else ""
    scope = f" on {p['resource']}" if p.get("resource") else ""
    lines = [f"fmdoctor fix: {p.get('check')}{scope} in {p.get('cluster')} ({p.get('region')}{account})"]
    if calls:
        lines.append(f"plan {str(p.get('digest'))[:12]}: {plural(len(calls), 'API call')} for "
                     f"{plural(len(findings), 'finding')}, in this order:")
        lines += call_lines(calls)
    for title, key in (("already in place (skipped)", "satisfied"), ("cannot be applied", "conflicts")):
        if p.get(key):
            lines.append(f"{title}:")
            lines += [f"  - {e['call']['summary']}: {e['reason']}" for e in p[key]]
    if manual:
        lines.append("no automated fix (follow the runbook):")
        lines += [f"  - {m['finding']}: fmdoctor runbook show {m['runbook']}" for m in manual]
    elif unverified and not p.get("automated", True):
        lines.append(f"no automated fix (follow the runbook): fmdoctor runbook show {p.get('runbook')}")
    if unverified:
        lines.append("not verified (so not known to be healthy):")
        lines += [f"  - {what}" for what in unverified]
    if p.get("notes"):
        lines.append("notes:")
        lines += [f"  - {note}" for note in p["notes"]]
    if not calls and not manual and not p.get("conflicts") and not unverified:
        if findings:
            lines.append(f"nothing left to apply, yet {p.get('check')} still raises {', '.join(findings)}: every "
                         "planned change is already in place (AWS may be catching up; re-run the check)")
        else:
            lines.append(f"nothing to fix: {p.get('check')} raises no finding here")
    return lines


def call_lines(calls: list[dict[str, Any]]) -> list[str]:
    """Each call numbered, with its parameters as JSON (never a Python repr)."""
    lines = []
    for number, call in enumerate(calls, 1):
        summary = f": {call['summary']}" if call.get("summary") else ""
        lines.append(f"  {number}. {call.get('service')} {call.get('operation')}{summary}")
        lines += ["       " + line for line in json.dumps(call.get("params"), indent=2, default=str).splitlines()]
    return lines


@_shown
def preflight_lines(result: PreflightResult | Mapping[str, Any]) -> list[str]:
    checked = _plain(result)
    lines = ["pre-flight (EC2 DryRun, nothing is changed):"]
    for number, check in enumerate(checked.get("checks") or [], 1):
        mark = _PREFLIGHT_MARK.get(check.get("status"), "?")
        operation = (check.get("call") or {}).get("operation")
        lines.append(f"  {mark} {number}. {operation}: {check.get('status')}: {check.get('detail')}")
    if checked.get("note"):
        lines.append(checked["note"])
    if checked.get("denied_actions"):
        lines.append(f"missing permission: {', '.join(checked['denied_actions'])} (see 'fmdoctor iam-policy "
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
        lines.append(f"stopped at the first failure: {applied} of {plural(len(result.outcomes), 'call')} in place, "
                     f"{len(result.by_status('not-attempted'))} not attempted")
    verification = result.verification
    lines.append(f"verify: {verification.status}: {verification.detail}")
    return lines
