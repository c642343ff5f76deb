"""Markdown for tickets and chat: a status line, a findings table, then each finding's evidence."""

from __future__ import annotations

import json

from fmdoctor.engine.model import Report, Severity
from fmdoctor.words import plural


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    out = [
        f"# fmdoctor: {report.cluster} ({report.region}) is **{report.status.value.upper()}**",
        "",
        f"Generated {report.generated_at.isoformat()} · {plural(len(report.stats.checks_run), 'check')} · "
        f"{plural(sum(report.stats.api_calls.values()), 'AWS API call')} · {report.stats.duration_s:.1f}s",
        "",
    ]
    if report.findings:
        out += ["| Severity | Check | Resource | Summary |", "|---|---|---|---|"]
        for f in report.findings:
            out.append(f"| {f.severity.value} | `{f.check}` | `{f.resource}` | {_cell(f.summary)} |")
        out.append("")
        for severity in Severity:
            for f in (x for x in report.findings if x.severity == severity):
                out += [
                    f"## {severity.value}: `{f.check}` on `{f.resource}`",
                    "",
                    f.summary,
                    "",
                    "```json",
                    json.dumps(f.evidence, indent=2, ensure_ascii=False, default=str),
                    "```",
                    "",
                    f"Runbook: `fmdoctor runbook show {f.runbook}`",
                    "",
                ]
    else:
        out += ["No findings.", ""]
    if report.errors:
        out += ["## Could not verify", ""]
        for e in report.errors:
            action = f" (needs `{e.iam_action}`)" if e.iam_action else ""
            out.append(f"- `{e.check}`: {e.code}{action}: {_cell(e.unverified)}")
        out.append("")
    if report.skipped:
        out += ["## Skipped", ""] + [f"- `{s.check}`: {_cell(s.reason)}" for s in report.skipped] + [""]
    return "\n".join(out)
