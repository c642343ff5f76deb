"""Answers written from tool results only: every claim names the finding id (``check/resource``) or the
resource it rests on. Used by the offline planner and whenever a turn stops early (caps, token budget).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from fmdoctor.assistant.digest import grouping_of, incidents_of
from fmdoctor.assistant.intents import Intent, Plan
from fmdoctor.assistant.results import ToolResult, ToolStatus
from fmdoctor.engine.incidents import Incident

_ORDER = {"critical": 0, "warning": 1, "info": 2}
CHECK_TOOLS_PREFIX = "check_"
CHECK_RESOURCE = "check_resource"


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


def act_first_lines(incidents: list[Incident], now: datetime | None = None, limit: int = 3) -> list[str]:
    """The most urgent incidents as the answer's first list: what, how soon, how much, the first step, and the
    ids of the findings it stands on (the cause first)."""
    if not incidents:
        return []
    moment = now or datetime.now().astimezone()
    lines = [f"Act first ({_n(len(incidents), 'incident')}, most urgent first):"]
    for number, incident in enumerate(incidents[:limit], 1):
        facts = "; ".join(f for f in (incident.when(moment), incident.impact.words()) if f)
        ids = ", ".join(f"{f.check}/{f.resource}" for f in incident.findings)
        lines.append(f"{number}. [{incident.severity}] {incident.title}" + (f" ({facts})" if facts else "")
                     + f". Next: {incident.next_words()} (findings: {ids})")
    if len(incidents) > limit:
        lines.append(f"({_n(len(incidents) - limit, 'more incident')} below, in the findings.)")
    return lines


def by_incident(findings: list[dict], incidents: list[Incident]) -> list[dict]:
    """``findings`` in incident order (most urgent incident first, its cause first); any not in one after."""
    rank = {f"{ref.check}/{ref.resource}": n for n, ref in enumerate(r for i in incidents for r in i.findings)}
    return sorted(findings, key=lambda f: rank.get(f["id"], len(rank)))


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


def most_urgent_first(results: list[ToolResult]) -> list[ToolResult]:
    """check_resource's answers about several things, the one with the most urgent incident first (the ranking
    of every report, over all their findings): 'is gpu-node-2 or gpu-node-3 worse?' opens with the node Spot
    takes in a minute, not with the one named first. A name that is nothing of the cluster keeps its place."""
    known = [r for r in results if isinstance(r.data.get("entity"), dict)]
    if len(known) < 2:
        return results
    findings = {f["id"]: f for r in known for f in r.findings if isinstance(f, dict) and "id" in f}
    ranked = incidents_of(findings.values(), cluster=next((r.data.get("cluster") for r in known), None),
                          **grouping_of(known))

    def position(result: ToolResult) -> int:
        related = [findings[i] for i in [*result.data.get("on", []), *result.data.get("involves", [])]
                   if i in findings]
        return min((n for n, incident in enumerate(ranked) for f in related
                    if any(ref.check == f.get("check") and ref.resource == f.get("resource")
                           for ref in incident.findings)), default=len(ranked))

    order = iter(sorted(known, key=position))
    places = {id(r) for r in known}
    return [next(order) if id(r) in places else r for r in results]


def _entity_lines(plan: Plan, results: list[ToolResult]) -> list[str]:
    """One section per named thing: unknown said plainly, else the findings on it, then those involving it."""
    lines: list[str] = []
    topical = [i for i in plan.intents if i not in plan.missing]
    for result in most_urgent_first([r for r in results if r.tool == CHECK_RESOURCE]):
        entity = result.data.get("entity")
        if not isinstance(entity, dict):
            lines += ["", f"I cannot answer about {result.data.get('unknown') or 'it'}: {result.message}."]
            continue
        label = entity.get("label") or entity.get("id")
        by_id = {f["id"]: f for f in result.findings}
        on = [by_id[i] for i in result.data.get("on", []) if i in by_id]
        involved = [by_id[i] for i in result.data.get("involves", []) if i in by_id]
        about = f" concerning {topical[0].topic_about(str(entity.get('kind', '')))}" if topical else ""
        lines.append("")
        if result.data.get("note"):
            lines.append(f"{result.data['note']}.")
        if on or involved:
            counts = (f"{_n(len(on), 'finding')} on it" + (f" and {len(involved)} involving it" if involved else "")
                      if on else f"{_n(len(involved), 'finding')} involving it")
            critical = [f["check"] for f in on or involved if f["severity"] == "critical"]
            also = f" ({', '.join(critical)} critical)" if len(critical) > 1 else ""
            lines.append(f"{label} has {counts}{about}{also}. {_first(result, on + involved)}")
            lines += _incident_lines(result)
        elif result.errors:
            lines.append(f"No problem found{about} on {label}, but {_n(len(result.errors), 'part')} could not be "
                         "verified, so I cannot call it healthy.")
        elif result.checks_run:
            lines.append(f"No problem found{about} on {label}: {_n(len(result.checks_run), 'check')} ran and found "
                         "nothing about it.")
        else:
            lines.append(f"Nothing could be checked{about} on {label}.")
        lines += [f"On {label}:"] + [finding_line(f) for f in on] if on else []
        lines += [f"Involving {label}:"] + [finding_line(f) for f in involved] if involved else []
        if result.errors:
            lines += [f"Could not verify (about {label}):"] + [error_line(e) for e in result.errors]
        others = result.data.get("other_findings") or 0
        if others:
            verb = "concerns" if others == 1 else "concern"
            lines.append(f"({_n(others, 'other finding')} of these checks {verb} other resources, not {label}.)")
    return lines[1:] if lines and not lines[0] else lines


def _first(result: ToolResult, related: list[dict]) -> str:
    """What to act on first: the most urgent incident the thing is part of (on it or through it), else the
    worst finding."""
    incidents = [i for i in result.data.get("incidents") or [] if isinstance(i, dict)]
    if not incidents:
        worst = sorted(related, key=lambda f: _ORDER.get(f["severity"], 3))[0]
        return f"The worst: [{worst['severity']}] {worst['id']}: {worst['summary']}"
    first = incidents[0]
    when = f", {first['when']}" if first.get("when") else ""
    cause = first.get("cause") or {}
    others = f" ({_n(len(incidents) - 1, 'other incident')} involve it)" if len(incidents) > 1 else ""
    return (f"Most urgent{others}: [{first['severity']}] {first['title']}{when}; cause "
            f"{cause.get('check')}/{cause.get('resource')}; first step: {first.get('first_step')}")


def _incident_lines(result: ToolResult, limit: int = 5) -> list[str]:
    """The incidents the thing is part of, most urgent first, when there is more than one."""
    incidents = [i for i in result.data.get("incidents") or [] if isinstance(i, dict)]
    if len(incidents) < 2:
        return []
    lines = ["Incidents involving it, most urgent first:"]
    for incident in incidents[:limit]:
        when = f" ({incident['when']})" if incident.get("when") else ""
        lines.append(f"- [{incident['severity']}] {incident['title']}{when}; first step: {incident.get('first_step')}")
    if len(incidents) > limit:
        lines.append(f"- and {_n(len(incidents) - limit, 'more incident')}")
    return lines


def _path_lines(results: list[ToolResult]) -> list[str]:
    """A 'can X reach Y?' answer: yes, no (what blocks it and the rule that fixes it) or not verified."""
    result = next((r for r in results if r.tool == "why_not"), None)
    if result is None:
        return ["I could not trace that path: the trace did not run."]
    data = result.data.get("reachability")
    if result.status is ToolStatus.ERROR or not isinstance(data, dict):
        return [f"I could not trace that path: {result.message}."]
    hops = data.get("hops") or []
    if data.get("reachable") is True:
        return [f"Yes: {result.message} ({_n(len(hops), 'hop')} checked: security groups, network ACLs and routes "
                "admit it both ways)."]
    blocked = data.get("blocked_by") or {}
    if data.get("reachable") is False:
        rule = f"; the rule that fixes it: {blocked['rule']}" if blocked.get("rule") else ""
        remedy = (blocked.get("evidence") or {}).get("remedy")
        return [f"No: {result.message}{rule}."] + ([f"To fix it: {remedy}."] if remedy else [])
    unverified = [h for h in hops if isinstance(h, dict) and h.get("verdict") == "unverified"]
    detail = f": {unverified[0].get('detail')}" if unverified else ""
    return [f"Not verified: nothing blocks it, but part of the path could not be evaluated{detail}."]


def compose(question: str, plan: Plan, results: list[ToolResult], *, target: dict | None = None,
            remediation: bool = False, note: str = "") -> str:
    head = [note] if note else []
    if plan.path is not None:
        return "\n".join(head + _path_lines(results)).strip()
    scoped = [r for r in results if r.tool == CHECK_RESOURCE]
    if scoped and len(scoped) == len(results):
        ran = gather(results)[2]
        return "\n".join(head + _entity_lines(plan, results) + ([""] + [f"Checks run: {', '.join(ran)}."]
                                                                  if ran else [])).strip()
    unknown = [r for r in scoped if r.status is ToolStatus.ERROR]  # a weak name: answered for the cluster
    head += [f"{r.message}; so this answer is about the whole cluster." for r in unknown]
    results = [r for r in results if r not in unknown]
    findings, errors, ran, skipped = gather(results)
    cluster = next((r.data["cluster"] for r in results if r.data.get("cluster")), "the cluster")
    fix_lines = _fix_lines(results, target, remediation) if plan.fix or plan.runbook else []
    reach = _reachability_lines(results)
    lines: list[str] = head
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
        cluster_name = cluster if cluster != "the cluster" else None
        region = next((r.data["region"] for r in results if r.data.get("region")), None)
        incidents = incidents_of(findings, cluster=cluster_name, region=region, **grouping_of(results))
        if not fix_lines:
            lines += [""] + act_first_lines(incidents)
        lines += ["", "Still open:" if fixed else "Findings:"] + [finding_line(f) for f in by_incident(findings,
                                                                                                     incidents)]
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
