"""The one confirmation dialogue of every command that changes AWS (``fmdoctor fix``, ``fmdoctor ask``): the
plan as ``fmdoctor fix`` prints it on stdout, then one question on stderr that only 'y' or 'yes' answers yes."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from fmdoctor.words import plural

ACCEPTED = frozenset({"y", "yes"})


def show_plan(plan: Any, preflight: Any = None, out: TextIO | None = None) -> None:
    """The plan (a FixPlan or its JSON form) and its pre-flight, exactly as ``fmdoctor fix`` shows them."""
    from fmdoctor.report.fix import plan_lines, preflight_lines

    out = out or sys.stdout
    lines = plan_lines(plan) + (preflight_lines(preflight) if preflight else [])
    out.write("\n".join(lines) + "\n")
    out.flush()


def question(plan: Any) -> str:
    data: Mapping[str, Any] = plan.to_json_dict() if hasattr(plan, "to_json_dict") else (plan or {})
    account = f", account {data['account']}" if data.get("account") else ""
    where = f" to {data['cluster']} ({data.get('region')}{account})" if data.get("cluster") else ""
    return f"Apply {plural(len(data.get('calls') or []), 'API call')}{where}?"


def confirm(plan: Any, ask: TextIO | None = None, answers: TextIO | None = None) -> bool:
    """Ask on ``ask`` (stderr) and read one line from ``answers`` (stdin); True only for y or yes."""
    ask, answers = ask or sys.stderr, answers or sys.stdin
    ask.write(f"{question(plan)} [y/N] ")
    ask.flush()
    try:
        reply = answers.readline()
    except (EOFError, KeyboardInterrupt):
        reply = ""
    return reply.strip().lower() in ACCEPTED
