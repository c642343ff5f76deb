"""A reachability answer for people: the verdict, the blocker and its fix, then the path hop by hop."""

from __future__ import annotations

import io
import textwrap

from rich.console import Console
from rich.text import Text

from fmdoctor.net.model import BLOCK, PASS, ReachabilityResult
from fmdoctor.report.text import make_console

MARK = {PASS: ("✓", "green"), BLOCK: ("✗", "red"), "unverified": ("?", "magenta")}
VERDICT = {True: ("REACHABLE", "bold green"), False: ("BLOCKED", "bold red"), None: ("NOT VERIFIED", "bold magenta")}


def render_reachability(result: ReachabilityResult, cluster: str = "", color: bool = False) -> str:
    buffer = io.StringIO()
    write_reachability(result, make_console(buffer, color=color), cluster)
    return buffer.getvalue()


def write_reachability(result: ReachabilityResult, console: Console, cluster: str = "") -> None:
    word, style = VERDICT[result.reachable]
    title = Text()
    title.append(f"{word} ", style=style)
    title.append(f"{result.flow.describe()} from {result.source.label} to {result.destination.label}")
    if cluster:
        title.append(f" ({cluster})", style="dim")
    _wrapped(console, title.plain, 0, style=style if result.reachable is False else "")
    blocked = result.blocked_by
    if blocked is not None:
        console.print()
        _wrapped(console, f"{blocked.code} at {blocked.component} {blocked.resource}", 2, style="bold")
        _wrapped(console, blocked.summary, 4)
        if blocked.evidence.get("remedy"):
            _wrapped(console, f"fix: {blocked.evidence['remedy']}", 4)
        for action in blocked.fix:
            detail = " ".join(f"{k}={v}" for k, v in action.items() if k != "action")
            _wrapped(console, f"hint: {action['action']} {detail}", 6, style="dim")
    elif result.reachable is None:
        console.print()
        _wrapped(console, "Nothing blocks it, but part of the path was not evaluated:", 2)
        for hop in result.unverified:
            _wrapped(console, f"{hop.component} {hop.resource}: {hop.detail}", 4)
    for warning in result.warnings:  # reachable, but not for every kind of client
        console.print()
        _wrapped(console, f"warning: {warning.code} at {warning.component} {warning.resource}", 2, style="bold yellow")
        _wrapped(console, warning.summary, 4)
        _wrapped(console, f"fix: {warning.remedy}", 4)
    console.print()
    console.print("Path", style="bold")
    ways = list(dict.fromkeys(h.path for h in result.hops if h.path))
    current = None
    for hop in result.hops:
        if hop.path != current and hop.path:  # several ways out: each under its own heading
            _wrapped(console, f"way {ways.index(hop.path) + 1} of {len(ways)}: {hop.path}", 2, style="bold")
        current = hop.path
        indent = 4 if hop.path else 2
        mark, mark_style = MARK.get(hop.verdict, ("·", ""))
        line = Text(" " * indent)
        line.append(mark, style=mark_style)
        reply = " (reply)" if hop.direction == "return" else ""
        line.append(f" {hop.component}{reply} {hop.resource}")
        console.print(line, overflow="fold")
        _wrapped(console, hop.detail, indent + 4, style="dim")
        if hop.rule and hop.verdict != BLOCK:
            _wrapped(console, f"rule: {hop.rule}", indent + 4, style="dim")


def _wrapped(console: Console, text: str, indent: int, style: str = "") -> None:
    width = max(20, console.width - indent)
    for line in textwrap.wrap(text, width=width, break_long_words=True, break_on_hyphens=False) or [""]:
        console.print(Text(" " * indent + line, style=style), overflow="crop", no_wrap=True)
