"""The text a model reads for a set of findings: every finding as one line, worst first, with a count;
then a bounded digest of each finding's evidence; then what could not be verified, what ran and what
did not apply. Used for the assistant's tool results and for the MCP ``check`` tool's text content.

Nothing is dropped silently. When the limit bites, the text is cut in this order, and each cut says what
was left out and how to get it: evidence digests get shorter (then go, but for the line saying that an
automated fix exists), summaries get shorter, and only then are the least severe finding lines left out, with
their count per severity and per check and the call that lists them (``more``). Finding lines are never cut in
the middle.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from fmdoctor.engine.incidents import Incident, build_incidents
from fmdoctor.engine.model import Finding

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
EVIDENCE_CHARS = 240  # the most one finding's evidence digest takes
MIN_EVIDENCE_CHARS = 60  # below this a digest says too little to be worth its line
SUMMARY_CHARS = 320  # a summary longer than this is cut (get_finding has it whole)
MIN_SUMMARY_CHARS = 60
LINE_CHARS = 300  # the most one "not verified" or "not applicable" line takes
SEPARATOR = " | "
EVIDENCE_PREFIX = "  evidence: "
AUTOMATED_FIX = "automated fix: yes"  # first in a digest when the finding carries fix hints (propose_fix)


@dataclass(frozen=True)
class More:
    """How the reader gets what the digest leaves out: the full evidence of one finding, and the rest of
    the finding list from a position (``{offset}`` is filled in)."""

    evidence: str = "get_finding(id)"
    listing: str = "list_findings(offset={offset})"


MCP_MORE = More(evidence="this result's structured content (findings[].evidence), or get_runbook(runbook_id, "
                "finding_id)", listing="this result's structured content (findings[], same order)")


def ordered(findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Worst first; within a severity by check and resource, so positions are stable across calls."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(str(f.get("severity")), 3), str(f.get("check", "")),
                                           str(f.get("resource", ""))))


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def finding_id(finding: dict[str, Any]) -> str:
    return str(finding.get("id") or f"{finding.get('check')}/{finding.get('resource')}")


def finding_line(finding: dict[str, Any], summary_chars: int = SUMMARY_CHARS) -> str:
    runbook = finding.get("runbook")
    named = f" (runbook: {runbook})" if runbook and runbook != finding.get("check") else ""  # else it is the check id
    return SEPARATOR.join((str(finding.get("severity", "")), finding_id(finding),
                           cut(one_line(finding.get("summary", "")), summary_chars) + named))


INCIDENTS_SHOWN = 5  # incident lines in a tool result's head (the findings list has every finding)


def incidents_of(findings: Iterable[dict[str, Any]], now: datetime | None = None, cluster: str | None = None,
                 region: str | None = None, *, nodes: Mapping[str, str] | None = None,
                 demo: bool = False) -> list[Incident]:
    """The incidents of finding JSON as the tools return it: the grouping and ranking every report uses
    (:mod:`fmdoctor.engine.incidents`), with the run's node identities (``nodes``: :func:`grouping_of`) and, for
    the demo's findings, fix commands that carry ``--demo``. A finding read back from text has no evidence, so it
    stands alone."""
    made = []
    for raw in findings:
        try:
            made.append(Finding(check=str(raw.get("check")), severity=raw.get("severity"),
                                resource=str(raw.get("resource")), summary=str(raw.get("summary") or ""),
                                evidence=dict(raw.get("evidence") or {}),
                                runbook=str(raw.get("runbook") or raw.get("check"))))
        except (ValidationError, TypeError, ValueError):
            continue
    return build_incidents(made, now=now, cluster=cluster, region=region, node_of=(nodes or {}).get, demo=demo)


def grouping_of(results: Iterable[Any]) -> dict[str, Any]:
    """What tool results say about regrouping their findings: the node names their runs resolved (``nodes``: the
    run's :class:`~fmdoctor.engine.identity.NodeIdentities` answers) and whether they are the demo's (``demo``)."""
    nodes: dict[str, str] = {}
    demo = False
    for result in results:
        data = getattr(result, "data", None) or {}
        if isinstance(data.get("nodes"), Mapping):
            nodes.update({str(k): str(v) for k, v in data["nodes"].items()})
        demo = demo or bool(data.get("demo"))
    return {"nodes": nodes, "demo": demo}


def incident_line(number: int, incident: Incident, now: datetime) -> str:
    """``2. critical | cause-id (+ other ids) | deadline … | 1 job, 2 nodes | next: …``; never read back as a
    finding line (it starts with its number)."""
    ids = [f"{f.check}/{f.resource}" for f in incident.findings]
    shared = f" (+ {', '.join(ids[1:])})" if ids[1:] else ""
    parts = [f"{number}. {incident.severity}", ids[0] + shared, incident.when(now), incident.impact.words(),
             f"next: {incident.next_words()}"]
    return cut(SEPARATOR.join(p for p in parts if p), LINE_CHARS)


def incident_head(findings: Sequence[dict[str, Any]], budget: int, now: datetime | None = None,
                  cluster: str | None = None, region: str | None = None, shown: int = INCIDENTS_SHOWN, *,
                  nodes: Mapping[str, str] | None = None, demo: bool = False) -> list[str]:
    """The lines that open a result with findings: its incidents, most urgent first, each naming its cause
    first and the findings that share it; at most ``shown`` of them within ``budget`` characters, none when
    not even the most urgent one fits (the findings list that follows names every finding)."""
    moment = now or datetime.now().astimezone()
    incidents = incidents_of(findings, moment, cluster, region, nodes=nodes, demo=demo)
    heading = ("incidents ({span}, most urgent first; severity | cause (+ the findings that share it) | when | "
               "impact | first step):")
    lines: list[str] = []
    used = len(heading) + 1
    for number, incident in enumerate(incidents[:shown], 1):
        line = incident_line(number, incident, moment)
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        used += len(line) + 1
    if not lines:
        return []
    span = f"{len(lines)} of {len(incidents)}" if len(lines) < len(incidents) else f"all {len(incidents)}"
    return [heading.format(span=span), *lines]


_RUNBOOK = re.compile(r" \(runbook: ([\w.-]+)\)$")
_ERROR = re.compile(r"^(?P<check>[\w.-]+): (?P<code>[\w.:-]+)(?: \(needs (?P<iam>[^)]+)\))?; "
                    r"not verified: (?P<what>.*)$")
_GROUPED_ERROR = re.compile(r"^(?P<checks>(?:[\w.-]+ \([^()]+\), )+[\w.-]+ \([^()]+\)): (?P<code>[\w.:-]+)"
                            r"(?: \(needs (?P<iam>[^)]+)\))?; not verified for each: (?P<what>.*)$")
_GROUPED_CHECK = re.compile(r"([\w.-]+) \(([^()]+)\)")
_OF_NODES = re.compile(r"^(?P<what>[^();]+?) of (?P<nodes>\d+ .+)$")  # "GPU idleness of 2 nodes without …"
_CLUSTER = re.compile(r"^cluster: (?P<cluster>\S+)(?: \((?P<region>[^)]+)\))?(?:, status (?P<status>\w+))?$")


def parse_finding_line(line: str) -> dict[str, Any] | None:
    """The finding a :func:`finding_line` names (id, check, resource, severity, summary, runbook), else None."""
    parts = line.split(SEPARATOR, 2)
    if len(parts) != 3 or parts[0] not in SEVERITY_ORDER or "/" not in parts[1]:
        return None
    check, resource = parts[1].split("/", 1)
    runbook = _RUNBOOK.search(parts[2])
    summary = parts[2][: runbook.start()] if runbook else parts[2]
    return {"id": parts[1], "check": check, "resource": resource, "severity": parts[0], "summary": summary,
            "runbook": runbook.group(1) if runbook else check, "evidence": {}}


def parse(lines: Sequence[str]) -> dict[str, Any]:
    """What a :func:`render` text states, for a reader that has only the text (a model's view, over the
    wire): findings (with a stand-in fix hint where the digest says an automated fix exists), not-verified
    parts, the checks run and the cluster line's facts."""
    parsed: dict[str, Any] = {"findings": [], "errors": [], "checks_run": [], "data": {}}
    section = ""
    for line in lines:
        if line.startswith("not verified ("):
            section = "errors"
        elif line.startswith("checks run ("):
            parsed["checks_run"] = [c.strip() for c in line.split("): ", 1)[-1].split(",") if c.strip()]
        elif (cluster := _CLUSTER.match(line)) is not None:
            parsed["data"] = {k: v for k, v in (("cluster", cluster["cluster"]), ("region", cluster["region"]),
                                                ("report_status", cluster["status"])) if v}
        elif (finding := parse_finding_line(line)) is not None:
            parsed["findings"].append(finding)
        elif line.startswith(EVIDENCE_PREFIX + AUTOMATED_FIX) and parsed["findings"]:
            parsed["findings"][-1]["evidence"]["fix"] = [{"action": "automated", "details": "get_finding(id)"}]
        elif section == "errors" and (group := _GROUPED_ERROR.match(line)) is not None:
            nodes, _, message = group["what"].partition("; ")
            parsed["errors"] += [{"check": check, "code": group["code"], "iam_action": group["iam"],
                                  "unverified": f"{what} of {nodes}", "message": message}
                                 for check, what in _GROUPED_CHECK.findall(group["checks"])]
        elif section == "errors" and (error := _ERROR.match(line)) is not None:
            what, _, message = error["what"].partition("; ")
            parsed["errors"].append({"check": error["check"], "code": error["code"], "iam_action": error["iam"],
                                     "unverified": what, "message": message})
    return parsed


def _brief(value: Any, width: int = 60, depth: int = 0) -> str:
    if isinstance(value, str):
        return cut(one_line(value), width)
    if isinstance(value, dict):
        if depth > 1:
            return "{…}"
        items = [f"{k}={_brief(v, 30, depth + 1)}" for k, v in value.items() if v not in (None, "", [], {})]
        more = f", +{len(items) - 3} more" if len(items) > 3 else ""
        return "{" + ", ".join(items[:3]) + more + "}"
    if isinstance(value, list | tuple):
        if depth > 1:
            return f"[{len(value)} items]"
        shown = [_brief(v, 40, depth + 1) for v in value[:3]]
        more = f", +{len(value) - 3} more" if len(value) > 3 else ""
        return "[" + ", ".join(shown) + more + "]"
    return json.dumps(value, default=str)


def evidence_digest(finding: dict[str, Any], limit: int = EVIDENCE_CHARS) -> str:
    """The facts behind a finding that its line does not already state: scalars first, then lists and
    objects abbreviated; at most ``limit`` characters."""
    evidence = finding.get("evidence") or {}
    said = f"{finding_id(finding)} {finding.get('summary', '')}"
    scalars, containers = [], []
    for key, value in evidence.items():
        if key == "fix" or value in (None, "", [], {}) or (isinstance(value, str) and value in said):
            continue
        (containers if isinstance(value, dict | list | tuple) else scalars).append(f"{key}={_brief(value)}")
    if evidence.get("fix"):
        scalars.insert(0, AUTOMATED_FIX)
    return cut("; ".join(scalars + containers), limit)


def _fixable(finding: dict[str, Any]) -> bool:
    return bool((finding.get("evidence") or {}).get("fix"))


def error_line(error: dict[str, Any]) -> str:
    action = f" (needs {error['iam_action']})" if error.get("iam_action") else ""
    detail = f"; {one_line(error['message'])}" if error.get("message") else ""
    return cut(f"{error.get('check')}: {error.get('code')}{action}; not verified: {one_line(error.get('unverified'))}"
               f"{detail}", LINE_CHARS)


def error_lines(errors: Sequence[dict[str, Any]]) -> list[str]:
    """One line per cause: errors that differ only in what each check could not judge about the same nodes
    (one metrics gap seen by every GPU check) share a line naming each check and what it could not judge."""
    groups: dict[tuple[Any, ...], list[tuple[dict[str, Any], re.Match[str] | None]]] = {}
    for error in errors:
        of_nodes = _OF_NODES.match(one_line(error.get("unverified", "")))
        key = ((error.get("code"), error.get("iam_action"), one_line(error.get("message") or ""), of_nodes["nodes"])
               if of_nodes else (id(error),))
        groups.setdefault(key, []).append((error, of_nodes))
    lines = []
    for group in groups.values():
        if len(group) == 1:
            lines.append(error_line(group[0][0]))
            continue
        first, nodes = group[0][0], key_nodes(group)
        checks = ", ".join(f"{e.get('check')} ({m['what']})" for e, m in group if m)
        action = f" (needs {first['iam_action']})" if first.get("iam_action") else ""
        detail = f"; {one_line(first['message'])}" if first.get("message") else ""
        lines.append(cut(f"{checks}: {first.get('code')}{action}; not verified for each: {nodes}{detail}",
                         LINE_CHARS * min(len(group), 3)))
    return lines


def key_nodes(group: Sequence[tuple[dict[str, Any], re.Match[str] | None]]) -> str:
    return next((m["nodes"] for _, m in group if m), "")


def severity_counts(findings: Sequence[dict[str, Any]]) -> str:
    counts = Counter(str(f.get("severity")) for f in findings)
    return ", ".join(f"{counts[s]} {s}" for s in sorted(counts, key=lambda s: SEVERITY_ORDER.get(s, 3)))


def _left_out(findings: Sequence[dict[str, Any]], offset: int, more: More) -> str:
    by_check = Counter(str(f.get("check")) for f in findings)
    checks = ", ".join(f"{check} {count}" for check, count in by_check.most_common())
    return (f"left out for lack of room: {len(findings)} more findings ({severity_counts(findings)}; by check: "
            f"{checks}); {more.listing.format(offset=offset)} lists them")


def render(findings: Sequence[dict[str, Any]], limit: int, *, head: Sequence[str] = (), errors: Sequence[dict] = (),
           checks_run: Sequence[str] = (), skipped: Sequence[dict] = (), offset: int = 0, total: int | None = None,
           more: More = More()) -> str:
    """The whole text, at most about ``limit`` characters (the head and the "not verified" lines are
    always kept: what could not be seen must never vanish). ``offset``/``total``: this is a page of a
    longer list (``findings`` already ordered from ``offset`` on)."""
    total = len(findings) + offset if total is None else total
    listed = list(findings)
    tail = []
    if errors:
        tail += [f"not verified ({len(errors)}; not healthy, only unknown):"] + error_lines(errors)
    if checks_run:
        tail.append(cut(f"checks run ({len(checks_run)}): {', '.join(checks_run)}", 4 * LINE_CHARS))
    if skipped:
        tail.append(cut("not applicable: " + "; ".join(f"{s.get('check')} ({one_line(s.get('reason'))})"
                                                       for s in skipped), 2 * LINE_CHARS))
    fixed = sum(len(line) + 1 for line in [*head, *tail])
    # Whether a fix exists is never left out with the evidence (propose_fix needs it): its marker is reserved.
    marker = len(EVIDENCE_PREFIX) + len(AUTOMATED_FIX) + 1
    room = limit - fixed - 2 * LINE_CHARS - marker * sum(1 for f in listed if _fixable(f))  # + heading, note
    summary_chars = SUMMARY_CHARS
    while summary_chars > MIN_SUMMARY_CHARS and sum(len(finding_line(f, summary_chars)) + 1 for f in listed) > room:
        summary_chars = max(MIN_SUMMARY_CHARS, summary_chars * 3 // 4)
    lines = [finding_line(f, summary_chars) for f in listed]
    shown, used = 0, 0
    while shown < len(lines) and used + len(lines[shown]) + 1 <= room:
        used += len(lines[shown]) + 1
        shown += 1
    shown = max(shown, min(1, len(lines)))  # a page always names at least one finding
    body = list(head)
    if not listed:
        return "\n".join(body + tail)
    span = f"{offset + 1}-{offset + shown} of {total}" if (offset or shown < total) else f"all {total}"
    how = "" if summary_chars == SUMMARY_CHARS else f"; summaries cut to {summary_chars} characters"
    per = min(EVIDENCE_CHARS, (room - used) // shown - len(EVIDENCE_PREFIX) - 1)
    if per >= MIN_EVIDENCE_CHARS:
        how += (f"; under each, facts its line does not state, at most {per} characters ({more.evidence} "
                "gives all of them)")
    body.append(f"findings ({span}, worst first; severity | id = check/resource | summary{how}):")
    for finding, line in zip(listed[:shown], lines[:shown], strict=True):
        body.append(line)
        digest = evidence_digest(finding, per) if per >= MIN_EVIDENCE_CHARS else AUTOMATED_FIX * _fixable(finding)
        if digest:
            body.append(EVIDENCE_PREFIX + digest)
    if per < MIN_EVIDENCE_CHARS:
        body.append(f"evidence left out for lack of room; {more.evidence} gives it for one finding")
    if shown < len(listed):
        body.append(_left_out(listed[shown:], offset + shown, more))
    return "\n".join(body + tail)
