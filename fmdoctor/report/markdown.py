"""Markdown for tickets and chat: a status line, the incidents to act on first, a findings table, then each
finding's evidence.

Values from the account are shown as text, never as markup or terminal control: escaped characters
(:func:`fmdoctor.safety.text.visible`), no backtick that could end a code span, the evidence as escaped JSON.
"""

from __future__ import annotations

import re
from typing import Any

from fmdoctor.engine.model import Report, Severity
from fmdoctor.safety.text import dumps_json, visible
from fmdoctor.words import plural

# Every character that starts Markdown markup in untrusted text (CommonMark lets any ASCII punctuation be
# backslash-escaped): links and images ``[..](..)``, raw HTML and autolinks ``<..>``, entities ``&#8238;`` (which
# would render a hidden character :func:`visible` escaped), code spans, emphasis, strikethrough, table pipes.
_MARKUP = re.compile(r"([\\`*_\[\]<>&|~])")


def _cell(text: Any) -> str:
    """Untrusted text as Markdown that shows it as it is: hidden characters escaped, no markup active."""
    return _MARKUP.sub(r"\\\1", visible(text, lines=False))


def code_span(text: Any, table: bool = True) -> str:
    """A code span for a value, wider than any run of backticks in it (so none of them can end it early).
    ``table``: it sits in a table cell, where a pipe must be escaped; elsewhere a backslash in a code span is
    shown as it is, so escaping would change a command a person copies."""
    shown = visible(text, lines=False)
    shown = shown.replace("|", "\\|") if table else shown
    ticks = "`" * (max((len(run) for run in re.findall("`+", shown)), default=0) + 1)
    return f"{ticks} {shown} {ticks}" if len(ticks) > 1 else f"`{shown}`"


def act_first(report: Report, limit: int = 8) -> list[str]:
    """The incidents most urgent first, one list item each (when, impact, next step), on one screen: at most
    ``limit``, then how many more; the findings table and details follow."""
    incidents = report.incidents()
    if not incidents:
        return []
    out = [f"## Act first: {plural(len(incidents), 'incident')}, most urgent first", ""]
    for number, incident in enumerate(incidents[:limit], 1):
        facts = [incident.when(report.generated_at), incident.impact.words()]
        if len(incident.findings) > 1:
            facts.append(plural(len(incident.findings), "finding"))
        shown = " · ".join(_cell(f) for f in facts if f)
        out.append(f"{number}. **{incident.severity}** {_cell(incident.title)}" + (f" — {shown}" if shown else "")
                   + f" — next: {code_span(incident.next_words(), table=False)}")
    if len(incidents) > limit:
        out.append(f"\n{plural(len(incidents) - limit, 'more incident')}: every finding is below.")
    return out + [""]


def render_markdown(report: Report) -> str:
    out = [
        f"# fmdoctor: {_cell(report.cluster)} ({_cell(report.region)}) is **{report.status.value.upper()}**",
        "",
        f"Generated {report.generated_at.isoformat()} · {plural(len(report.stats.checks_run), 'check')} · "
        f"{plural(sum(report.stats.api_calls.values()), 'AWS API call')} · {report.stats.duration_s:.1f}s",
        "",
    ]
    out += act_first(report)
    if report.findings:
        out += ["| Severity | Check | Resource | Summary |", "|---|---|---|---|"]
        for f in report.findings:
            out.append(f"| {f.severity.value} | {code_span(f.check)} | {code_span(f.resource)} | {_cell(f.summary)} |")
        out.append("")
        for severity in Severity:
            for f in (x for x in report.findings if x.severity == severity):
                out += [
                    f"## {severity.value}: {code_span(f.check)} on {code_span(f.resource)}",
                    "",
                    _cell(f.summary),
                    "",
                    "```json",
                    dumps_json(f.evidence, indent=2, default=str),
                    "```",
                    "",
                    f"Runbook: `fmdoctor runbook show {visible(f.runbook, lines=False)}`",
                    "",
                ]
    else:
        out += ["No findings.", ""]
    if report.errors:
        out += ["## Could not verify", ""]
        for e in report.errors:
            action = f" (needs `{e.iam_action}`)" if e.iam_action else ""
            out.append(f"- {code_span(e.check)}: {_cell(e.code)}{action}: {_cell(e.unverified)}")
        out.append("")
    if report.skipped:
        out += ["## Skipped", ""] + [f"- {code_span(s.check)}: {_cell(s.reason)}" for s in report.skipped] + [""]
    return "\n".join(out)
