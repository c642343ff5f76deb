"""Block Kit for a Report, a why-not answer, a runbook and a fix, within Slack's limits.

Slack caps a message at 50 blocks and a section's text at 3,000 characters. A long report is split into
several messages ("part 2/3"), a long text into several sections: nothing is cut off silently. Only an
evidence *summary* is abbreviated (with "…" and "+N more"); the Runbook button shows the whole of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from fmdoctor.engine.model import Finding, Report, Severity
from fmdoctor.remediation.actions import has_automated_fix
from fmdoctor.report.evidence import evidence_lines
from fmdoctor.safety.text import visible

Block = dict[str, Any]
Message = dict[str, Any]  # {"text": fallback, "blocks": [...]}

RUNBOOK_ACTION = "fmdoctor_runbook"
FIX_ACTION = "fmdoctor_fix"
FIX_CALLBACK = "fmdoctor_fix_confirm"
SECTION_CHARS = 2900  # under Slack's 3,000, leaving room for the ``` fences
STATUS_ICON = {"ok": ":large_green_circle:", "warning": ":large_yellow_circle:", "critical": ":red_circle:",
               "unknown": ":white_circle:"}
SEVERITY_ICON = {Severity.CRITICAL: ":red_circle:", Severity.WARNING: ":large_yellow_circle:",
                 Severity.INFO: ":large_blue_circle:"}


def escape(text: str) -> str:
    """Slack's three control characters; everything we show from AWS or a model is data, not markup. Control
    and hidden characters are shown as escapes (``\\u202e``), as in every other human-facing format."""
    return visible(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}


def chunks(text: str, size: int = SECTION_CHARS) -> list[str]:
    """Split at line ends into pieces of at most ``size`` characters (a longer line is split where it must)."""
    pieces: list[str] = []
    current = ""
    for line in text.splitlines(keepends=True):
        while len(line) > size:
            if current:
                pieces.append(current)
                current = ""
            cut = line.rfind(" ", size // 2, size)  # between words where there is a space to split at
            cut = size if cut <= 0 else cut
            pieces.append(line[:cut])
            line = line[cut:]
        if len(current) + len(line) > size:
            pieces.append(current)
            current = ""
        current += line
    if current or not pieces:
        pieces.append(current)
    return [p.rstrip("\n") or " " for p in pieces]


def code_sections(text: str) -> list[Block]:
    return [section(f"```{escape(piece)}```") for piece in chunks(text)]


def fixable(finding: Finding) -> bool:
    """Whether fmdoctor has an automated fix for the finding (a fix hint of a known action)."""
    return has_automated_fix(finding.evidence)


def finding_blocks(finding: Finding, cluster: str, index: int) -> list[Block]:
    lines = [f"*{escape(finding.resource)}* · `{escape(finding.check)}`", escape(finding.summary)]
    lines += [f"> {escape(line)}" for line in evidence_lines(finding, limit=4, width=150)]
    text = "\n".join(lines)
    if len(text) > SECTION_CHARS:  # a summary is one sentence; if one is ever this long, say it was cut
        text = text[:SECTION_CHARS - 30] + "… (cut: see its Runbook)"
    blocks: list[Block] = [{**section(text), "block_id": f"finding-{index}"}]
    buttons = [_button("Runbook", RUNBOOK_ACTION, {"cluster": cluster, "finding": finding.id,
                                                   "runbook": finding.runbook})]
    if fixable(finding):
        buttons.append(finding_fix_button(cluster, finding.check, finding.resource))
    blocks.append({"type": "actions", "block_id": f"actions-{index}", "elements": buttons})
    return blocks


def finding_fix_button(cluster: str, check: str, resource: str | None) -> Block:
    """Opens the confirm dialog with the exact plan; only configured approvers get past it."""
    return {**_button("Fix", FIX_ACTION, {"cluster": cluster, "check": check, "resource": resource}),
            "style": "danger"}


def _button(label: str, action_id: str, value: dict[str, Any]) -> Block:
    return {"type": "button", "text": {"type": "plain_text", "text": label}, "action_id": action_id,
            "value": json.dumps(value, separators=(",", ":"))[:2000]}


def report_messages(report: Report, max_blocks: int = 40, title: str = "") -> list[Message]:
    """The report as one or more messages: status, findings by severity (each with its buttons), errors."""
    status = report.status.value
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in Severity}
    summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n) or "no findings"
    head = (f"{STATUS_ICON[status]} *{escape(report.cluster)}* ({escape(report.region)}): *{status.upper()}* · "
            f"{summary}")
    units: list[list[Block]] = [[section(piece) for piece in chunks(title)] if title else []]
    units[0] += [section(head), context(f"{len(report.stats.checks_run)} checks · {report.stats.duration_s:.1f}s · "
                                        f"{report.generated_at:%Y-%m-%d %H:%M} UTC")]
    units.append(act_first_blocks(report))
    index = 0
    for severity in Severity:
        found = [f for f in report.findings if f.severity == severity]
        if not found:
            continue
        units.append([section(f"{SEVERITY_ICON[severity]} *{severity.value.capitalize()}* ({len(found)})")])
        for finding in found:
            units.append(finding_blocks(finding, report.cluster, index))
            index += 1
    if report.errors:
        text = "\n".join(f"• `{escape(e.check)}` {escape(e.code)}"
                         f"{' (needs ' + escape(e.iam_action) + ')' if e.iam_action else ''}: "
                         f"not verified: {escape(e.unverified)}" for e in report.errors)
        units.append([section(f":warning: *Could not verify* ({len(report.errors)})")])
        units += [[section(piece)] for piece in chunks(text)]
    if report.skipped:
        units.append([context("skipped: " + escape(", ".join(s.check for s in report.skipped)))])
    fallback = f"fmdoctor: {escape(report.cluster)} is {status} ({summary})"
    return pack(units, max_blocks, fallback)


def act_first_blocks(report: Report, limit: int = 5) -> list[Block]:
    """The incidents most urgent first (:mod:`fmdoctor.engine.incidents`), before the findings by severity: the
    first ``limit`` with when, impact and the first thing to do, then how many more."""
    incidents = report.incidents()
    if not incidents:
        return []
    lines = [f"*Act first* ({len(incidents)} incident{'s' if len(incidents) != 1 else ''}, most urgent first)"]
    for number, incident in enumerate(incidents[:limit], 1):
        facts = " · ".join(f for f in (incident.when(report.generated_at), incident.impact.words()) if f)
        icon = SEVERITY_ICON.get(Severity(incident.severity), ":white_circle:")
        lines.append(f"{number}. {icon} *{escape(incident.title)}*" + (f" — {escape(facts)}" if facts else "")
                     + f"\n      next: `{escape(incident.next_words())}`")
    if len(incidents) > limit:
        lines.append(f"+ {len(incidents) - limit} more: every finding is below")
    return [section(piece) for piece in chunks("\n".join(lines))]


def pack(units: Iterable[list[Block]], max_blocks: int, fallback: str) -> list[Message]:
    """Fill messages with whole units (a finding and its buttons stay together), numbering the parts."""
    messages: list[list[Block]] = [[]]
    for unit in units:
        if messages[-1] and len(messages[-1]) + len(unit) > max_blocks - 1:  # one block for "part k/n"
            messages.append([])
        messages[-1].extend(unit)
    if len(messages) == 1:
        return [{"text": fallback, "blocks": messages[0]}]
    total = len(messages)
    return [{"text": f"{fallback} (part {n}/{total})", "blocks": ([context(f"part {n}/{total}")] if n > 1 else [])
             + blocks + ([context(f"part {n}/{total}: continued below")] if n < total else [])}
            for n, blocks in enumerate(messages, 1)]


def fenced_chunks(text: str) -> list[str]:
    """Like :func:`chunks`, closing a code fence at the end of a piece and reopening it in the next."""
    pieces, carry = [], False
    for piece in chunks(text, SECTION_CHARS - 8):
        piece = ("```\n" if carry else "") + piece
        carry = piece.count("```") % 2 == 1
        pieces.append(piece + ("\n```" if carry else ""))
    return pieces


def text_messages(title: str, body: str, max_blocks: int = 40, code: bool = True) -> list[Message]:
    """A titled text (why-not, runbook, an answer) in sections of Slack's size, split into messages as needed."""
    sections = code_sections(body) if code else [section(piece) for piece in fenced_chunks(escape(body))]
    return pack([[section(title)], *[[s] for s in sections]], max_blocks, re.sub(r"[*`_]", "", title)[:150])


def markdown_to_mrkdwn(text: str) -> str:
    """Enough of Markdown for runbooks: headings and **bold** become Slack's *bold*; code fences stay."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            out.append("```")
            continue
        if not fenced:
            heading = re.match(r"^#{1,6}\s+(.*)$", line)
            line = f"*{heading.group(1)}*" if heading else re.sub(r"\*\*(.+?)\*\*", r"*\1*", line)
        out.append(line)
    return "\n".join(out)
