"""Answers written from tool results only: every claim names the finding id (``check/resource``) or the
resource it rests on. Used by the offline planner and whenever a turn stops early (caps, token budget).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fmdoctor.assistant.intents import Intent, Plan
from fmdoctor.assistant.results import ToolResult, ToolStatus

_ORDER = {"critical": 0, "warning": 1, "info": 2}
CHECK_TOOLS_PREFIX = "check_"


def gather(results: Iterable[ToolResult]) -> tuple[list[dict], list[dict], list[str], list[dict]]:
    """(findings, errors, checks run, skipped) across results, without repeats, worst finding first."""
    findings: dict[str, dict] = {}
    errors: dict[tuple[str, str, str], dict] = {}
    ran: dict[str, None] = {}
    skipped: dict[str, dict] = {}
    for result in results:
        for finding in result.findings:
            findings.setdefault(finding["id"], finding)
        for error in result.errors:
            errors.setdefault((error["check"], error["code"], error.get("unverified", "")), error)
        ran.update(dict.fromkeys(result.checks_run))
        for skip in result.skipped:
            skipped.setdefault(skip["check"], skip)
    ordered = sorted(findings.values(), key=lambda f: _ORDER.get(f["severity"], 3))
    return ordered, list(errors.values()), list(ran), list(skipped.values())


def finding_line(finding: dict) -> str:
    return f"- [{finding['severity']}] {finding['id']}: {finding['summary']} (runbook: {finding['runbook']})"


def error_line(error: dict) -> str:
    action = f", needs {error['iam_action']}" if error.get("iam_action") else ""
    return f"- {error['check']}: {error['code']}{action}; not verified: {error['unverified']}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _count(findings: list[dict], severity: str) -> int:
    return sum(1 for f in findings if f["severity"] == severity)


def health_headline(findings: list[dict], errors: list[dict], ran: list[str], cluster: str) -> str:
    critical, warning = _count(findings, "critical"), _count(findings, "warning")
    if critical:
        return f"{cluster} is not healthy: {critical} critical and {_n(warning, 'warning finding')}."
    if warning:
        return f"{cluster} has {_n(warning, 'warning finding')} and nothing critical."
    if errors:
        return (f"No problem found on {cluster}, but {_n(len(errors), 'part')} could not be verified, "
                "so I cannot call it healthy.")
    if not ran:
        return f"Nothing could be checked on {cluster}."
    return f"{cluster} is healthy: {_n(len(ran), 'check')} ran and found nothing."


def _topic_headline(intent: Intent, findings: list[dict], errors: list[dict], ran: list[str]) -> str:
    relevant = [f for f in findings if f["check"] in intent.checks]
    if intent.name == "spot":
        if relevant:
            verb = "bears" if len(relevant) == 1 else "bear"
            return f"Yes, work is at risk if Spot reclaims nodes: {_n(len(relevant), 'finding')} {verb} on it."
        return ("No Spot interruption is pending and the checkpoints checked are fresh, so nothing here puts "
                "work at risk.")
    if intent.name == "slow":
        if relevant:
            return f"{_n(len(relevant), 'finding')} can slow or stall distributed training."
        return "No check found a cause of slow training: the checks that ran found nothing."
    if relevant:
        verb = "concerns" if len(relevant) == 1 else "concern"
        return f"{_n(len(relevant), 'finding')} {verb} {intent.topic}."
    unverified = f" ({_n(len(errors), 'part')} could not be verified)" if errors else ""
    return f"No problem found with {intent.topic}{unverified}."


def _reachability_lines(results: list[ToolResult]) -> list[str]:
    lines = []
    for result in results:
        data = result.data.get("reachability")
        if result.tool != "why_not" or not isinstance(data, dict):
            continue
        blocked = data.get("blocked_by") or {}
        if data.get("reachable"):
            lines.append(f"- why_not: {result.message}; hops: {len(data.get('hops') or [])}.")
        else:
            rule = f"; the rule that fixes it: {blocked['rule']}" if blocked.get("rule") else ""
            lines.append(f"- {blocked.get('resource') or data.get('destination')}: {result.message}{rule}.")
    return lines


def _fix_lines(results: list[ToolResult], target: dict | None, remediation: bool) -> list[str]:
    by_tool = {r.tool: r for r in results}
    applied, proposed, runbook = by_tool.get("apply_fix"), by_tool.get("propose_fix"), by_tool.get("get_runbook")
    if runbook is not None and runbook.status is ToolStatus.SUCCESS:
        return [f"Runbook {runbook.data.get('runbook_id')} for {runbook.data.get('finding_id')}:", "",
                str(runbook.data.get("markdown", "")).strip()]
    if applied is not None:
        if applied.data.get("denied") or applied.data.get("refused"):
            digest = applied.data.get("digest") or (proposed.data.get("digest") if proposed else "")
            return [f"Not applied: plan {digest} was not approved, so nothing was changed."]
        verdict = "applied" if applied.status is ToolStatus.SUCCESS else "not confirmed"
        return [f"Fix {verdict}: {applied.message}."]
    if proposed is not None:
        if proposed.status is ToolStatus.NO_DATA:
            return [f"{proposed.message[:1].upper()}{proposed.message[1:]}."]
        if proposed.status is ToolStatus.APPROVAL_REQUIRED:
            return [f"A fix is planned and waits for your approval: plan {proposed.data.get('digest')}."]
        return [f"Could not plan the fix: {proposed.message}."]
    if target is None:
        return []
    hints = "; ".join(_describe_hint(h) for h in target["evidence"]["fix"])
    if not remediation:
        return [f"Automatic fixes are not available in this installation; to fix {target['id']} by hand: {hints} "
                f"(runbook: {target['runbook']})."]
    return [f"To fix {target['id']}: {hints}."]


def fixed_ids(results: list[ToolResult], findings: list[dict]) -> list[str]:
    """Findings an applied and verified fix removed in this turn (the plan says which; else its check)."""
    applied = next((r for r in results if r.tool == "apply_fix" and r.status is ToolStatus.SUCCESS
                    and "verified: " in r.message), None)
    if applied is None:
        return []
    proposed = next((r for r in results if r.tool == "propose_fix"), None)
    plan = proposed.data.get("plan") if proposed else None
    if isinstance(plan, dict) and isinstance(plan.get("findings"), list):
        return [str(i) for i in plan["findings"]]
    check, resource = applied.data.get("check_id"), applied.data.get("resource")
    return [f["id"] for f in findings if f["check"] == check and resource in (None, f["resource"])]


def _describe_hint(hint: dict[str, Any]) -> str:
    details = ", ".join(f"{k}={v}" for k, v in hint.items() if k != "action")
    return f"{hint.get('action')} ({details})"


def _headline(plan: Plan, results: list[ToolResult], findings: list[dict], errors: list[dict], ran: list[str],
              cluster: str, fix_lines: list[str], reach: list[str]) -> str:
    """The answer's first sentence: what was asked, answered."""
    if fix_lines:
        return fix_lines[0]
    if plan.fix:
        if not findings:
            return f"Nothing to fix: {health_headline(findings, errors, ran, cluster)}"
        return "None of these findings has an automatic fix; their runbooks say what to do."
    if reach and not any(f["check"] == "ssh-unreachable" for f in findings):
        return reach[0].removeprefix("- ")
    if results and all(r.tool == "list_findings" for r in results):
        return (f"{_n(len(findings), 'finding')} so far in this conversation on {cluster}:" if findings else
                f"No findings so far in this conversation on {cluster}.")
    topical = [i for i in plan.intents if i not in plan.missing]
    if topical and not plan.full_run:
        return _topic_headline(topical[0], findings, errors, ran)
    return health_headline(findings, errors, ran, cluster)


def compose(question: str, plan: Plan, results: list[ToolResult], *, target: dict | None = None,
            remediation: bool = False, note: str = "") -> str:
    findings, errors, ran, skipped = gather(results)
    cluster = next((r.data["cluster"] for r in results if r.data.get("cluster")), "the cluster")
    fix_lines = _fix_lines(results, target, remediation) if plan.fix or plan.runbook else []
    reach = _reachability_lines(results)
    lines: list[str] = [note] if note else []
    if plan.missing and plan.full_run:  # say first what could not be answered as asked
        topics = ", ".join(i.topic for i in plan.missing)
        ids = ", ".join(c for i in plan.missing for c in i.checks)
        lines.append(f"No installed check covers {topics} ({ids}), so I ran every check:")
    headline = _headline(plan, results, findings, errors, ran, cluster, fix_lines, reach)
    lines.append(headline)
    lines += fix_lines[1:] + [r for r in reach if r.removeprefix("- ") != headline]
    failed = [r for r in results if r.status is ToolStatus.ERROR and r.tool.startswith(CHECK_TOOLS_PREFIX)]
    lines += [f"- {r.tool} failed: {r.message}" for r in failed]
    fixed = fixed_ids(results, findings)
    if fixed:
        lines.append(f"Fixed now: {', '.join(fixed)}.")
        findings = [f for f in findings if f["id"] not in fixed]
    if findings:
        lines += ["", "Still open:" if fixed else "Findings:"] + [finding_line(f) for f in findings]
    if errors:
        lines += ["", "Could not verify:"] + [error_line(e) for e in errors]
    if ran:
        lines += ["", f"Checks run: {', '.join(ran)}."]
    if skipped:
        by_reason: dict[str, list[str]] = {}
        for skip in skipped:
            by_reason.setdefault(skip["reason"], []).append(skip["check"])
        lines.append("Not applicable: " + "; ".join(f"{', '.join(checks)} ({reason})"
                                                     for reason, checks in by_reason.items()) + ".")
    return "\n".join(lines).strip()
