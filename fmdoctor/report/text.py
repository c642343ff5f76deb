"""The human report: grouped by severity, at most 80 columns, colour only on a terminal without NO_COLOR.

Every console made here (:func:`make_console`, shared by the check, why-not and fleet reports) writes text
through :func:`fmdoctor.safety.text.visible`: whatever a tag, an S3 key or an AWS message holds, no escape
sequence or control character reaches the terminal and no hidden character goes unseen.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterable
from typing import TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.text import Text

from fmdoctor.engine.incidents import Incident
from fmdoctor.engine.model import Report, Severity, Status
from fmdoctor.report.evidence import evidence_lines
from fmdoctor.safety.text import visible
from fmdoctor.words import plural

WIDTH = 80
ACT_FIRST_DETAILED = 4  # incidents shown with their time, impact and next step; the next ones get a line each
ACT_FIRST_LINES = 20  # the whole section, so it fits one screen above the details
STATUS_STYLE = {Status.OK: "bold green", Status.WARNING: "bold yellow", Status.CRITICAL: "bold red",
                Status.UNKNOWN: "bold magenta"}
SEVERITY_STYLE = {Severity.CRITICAL: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
SEVERITY_MARK = {Severity.CRITICAL: "✗", Severity.WARNING: "!", Severity.INFO: "i"}


class SafeConsole(Console):
    """A rich console whose text is shown, never obeyed: control and hidden characters in what it prints are
    written as escapes (rich's own styling and cursor control are separate segments and stay as they are)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            Segment(visible(s.text), s.style, s.control) if s.control is None else s for s in buffer)


def make_console(file: TextIO | None = None, color: bool | None = None) -> Console:
    """A console that never exceeds 80 columns; colour follows the terminal and NO_COLOR."""
    file = file or sys.stdout
    is_tty = hasattr(file, "isatty") and file.isatty()
    if color is None:
        color = is_tty and "NO_COLOR" not in os.environ
    width = WIDTH
    if is_tty:
        with contextlib.suppress(OSError, ValueError):
            width = min(WIDTH, os.get_terminal_size(file.fileno()).columns)
    return SafeConsole(file=file, width=width, no_color=not color, color_system="auto" if color else None,
                   highlight=False, emoji=False, soft_wrap=False)


def render_text(report: Report, color: bool = False) -> str:
    buffer = io.StringIO()
    write_text(report, make_console(buffer, color=color))
    return buffer.getvalue()


def write_text(report: Report, console: Console) -> None:
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in Severity}
    title = Text()
    title.append("fmdoctor check ", style="bold")
    title.append(f"{visible(report.cluster, lines=False)} ({visible(report.region, lines=False)}) ")
    title.append(report.status.value.upper(), style=STATUS_STYLE[report.status])
    console.print(title)
    summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n) or "no findings"
    calls = sum(report.stats.api_calls.values())
    console.print(
        f"{summary} · {plural(len(report.stats.checks_run), 'check')} · {plural(calls, 'API call')} · "
        f"{report.stats.duration_s:.1f}s",
        style="dim",
    )
    incidents = report.incidents()
    if incidents:
        console.print()
        write_act_first(console, incidents, report)
    for severity in Severity:
        group = [f for f in report.findings if f.severity == severity]
        if not group:
            continue
        console.print()
        console.print(severity.value.upper(), style=f"bold {SEVERITY_STYLE[severity]}")
        for finding in group:
            head = Text("  ")
            head.append(SEVERITY_MARK[severity] + " ", style=SEVERITY_STYLE[severity])
            head.append(finding.check, style="bold")
            head.append(f"  {visible(finding.resource, lines=False)}")
            console.print(head, overflow="fold")
            _indented(console, visible(finding.summary, lines=False), 4)
            for line in evidence_lines(finding, width=console.width - 6):
                _indented(console, line, 6, style="dim")
            _indented(console, f"runbook: fmdoctor runbook show {finding.runbook}", 4, style="dim")
    if report.errors:
        console.print()
        console.print("COULD NOT VERIFY", style="bold magenta")
        for error in report.errors:
            action = f" (needs {error.iam_action})" if error.iam_action else ""
            console.print(Text(f"  ? {error.check}: {error.code}{action}"), overflow="fold")
            _indented(console, f"not verified: {error.unverified}", 4)
            if error.message:
                _indented(console, error.message, 4, style="dim")
    if report.skipped:
        console.print()
        console.print("SKIPPED", style="bold dim")
        for skipped in report.skipped:
            _indented(console, f"{skipped.check}: {skipped.reason}", 2, style="dim")
    if report.status == Status.OK:
        console.print()
        console.print("All checks passed.", style="green")


def write_act_first(console: Console, incidents: list[Incident], report: Report) -> None:
    """The incidents, most urgent first, on one screen: the first few with when, impact and the first thing to
    do, then one line each while the section stays within ACT_FIRST_LINES; the details follow below."""
    counts = {s: sum(1 for i in incidents if i.severity == s.value) for s in Severity}
    tally = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
    console.print(Text(f"ACT FIRST · {plural(len(incidents), 'incident')} ({tally}), most urgent first",
                       style="bold"), overflow="ellipsis", no_wrap=True)
    lines, shown = 1, 0
    for number, incident in enumerate(incidents, 1):
        facts = [incident.when(report.generated_at), incident.impact.words()]
        if len(incident.findings) > 1:
            facts.append(plural(len(incident.findings), "finding"))
        said = " · ".join(f for f in facts if f) or "no deadline in the evidence"
        # Counted as printed (a long fix command wraps), with a line kept for "+ N more" unless this is the last.
        room = ACT_FIRST_LINES - lines - (1 if number < len(incidents) else 0)
        detailed = number <= ACT_FIRST_DETAILED and 1 + sum(
            len(_wrap(visible(t, lines=False), _indent_width(console, 5))) for t in (said, _next(incident))) <= room
        if not detailed and room < 1:
            break
        severity = Severity(incident.severity)
        head = Text(f"{number:>2} ")
        head.append(SEVERITY_MARK[severity] + " ", style=SEVERITY_STYLE[severity])
        head.append(visible(incident.title, lines=False), style="bold" if detailed else "")
        console.print(head, overflow="ellipsis", no_wrap=True)
        lines, shown = lines + 1, number
        if not detailed:
            continue
        lines += _indented(console, said, 5, style="dim")
        lines += _indented(console, _next(incident), 5)
    if shown < len(incidents):
        rest = incidents[shown:]
        critical = sum(1 for i in rest if i.severity == Severity.CRITICAL.value)
        more = f" ({critical} critical)" if critical else ""
        console.print(f"   + {plural(len(rest), 'more incident')}{more}: every finding is below", style="dim")


def _next(incident: Incident) -> str:
    return f"next: {incident.next_words()}"


def _indent_width(console: Console, indent: int) -> int:
    return max(20, console.width - indent)


def _indented(console: Console, text: str, indent: int, style: str = "") -> int:
    """Print ``text`` wrapped under ``indent``; the number of lines it took."""
    width = _indent_width(console, indent)
    text = visible(text, lines=False)  # measured as it will be shown
    lines = _wrap(text, width)
    for line in lines:
        console.print(Text(" " * indent + line, style=style), overflow="crop", no_wrap=True)
    return len(lines)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` terminal cells, at spaces where a word fits, else through the word.
    Measured in cells, not characters: a wide (CJK) character takes two, and a line counted in characters is
    cropped at the screen's edge, silently losing the end of what it says (the end of a command)."""
    lines: list[str] = []
    line = ""
    for word in text.strip(" ").split(" "):  # runs of spaces inside a line stay (aligned evidence)
        candidate = f"{line} {word}" if line else word
        if cell_len(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line.rstrip(" "))
        line = ""
        for char in word:  # a word wider than the line is cut where it must be
            if line and cell_len(line + char) > width:
                lines.append(line)
                line = ""
            line += char
    return [*lines, line] if line or not lines else lines
