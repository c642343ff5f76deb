"""``fmdoctor ask "QUESTION"``: one question to the assistant, answered from the checks it runs.

The model comes from ``--model``, else ``FMDOCTOR_MODEL``, else ``agent.model`` in the config; unset means
the offline planner. A fix is applied only after a person answers y (or yes) at the terminal, in the same
dialogue as ``fmdoctor fix``; without a terminal to ask on, the plan is printed (``approval_required`` in
JSON) and nothing changes.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import textwrap
from datetime import UTC, datetime
from typing import Any, TextIO

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target
from fmdoctor.cli.confirm import confirm, show_plan
from fmdoctor.cli.deadline import add_timeout_arg, within
from fmdoctor.cli.progress import starting
from fmdoctor.engine.errors import ConfigError, FmdoctorError
from fmdoctor.words import plural


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ask",
        help="ask the assistant a question about a cluster",
        description="Answer a question by running the relevant checks; every claim cites a finding id. "
        "Offline (no model, no network) unless --model, FMDOCTOR_MODEL or agent.model names a provider.",
    )
    parser.add_argument("question", help='e.g. "why is training slow?"')
    add_target_args(parser)
    add_connection_args(parser)
    parser.add_argument("--model", metavar="PROVIDER:MODEL", help="a provider string, e.g. openai:gpt-4o-mini; "
                        "default FMDOCTOR_MODEL, then agent.model, then the offline planner")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--no-progress", action="store_true", help="do not show tool calls on stderr")
    add_timeout_arg(parser)
    parser.set_defaults(func=run)


def model_spec(args: argparse.Namespace) -> str | None:
    return args.model or os.environ.get("FMDOCTOR_MODEL") or None


def run(args: argparse.Namespace) -> int:
    from fmdoctor.assistant import Assistant, ToolFinished, TurnFinished
    from fmdoctor.assistant.providers import aws_services

    spec = model_spec(args)
    if args.demo and aws_services(spec):
        raise ConfigError(f"--demo runs AWS in-process with fake credentials, so {spec} cannot be called from it",
                          hint="use --demo with a model outside AWS, or the offline planner")
    show_progress = args.format == "text" and not args.no_progress
    with open_target(args) as target:
        if show_progress:
            starting(target.doctor, target.cluster, "asking about", sys.stderr)

        def turn(cancel: Any) -> tuple[Any, Any]:
            # An unknown cluster or bad credentials: exit 3 before asking, without reading the whole inventory
            # the assistant's checks read again.
            target.doctor.confirm_target(target.cluster)
            assistant = Assistant(target.doctor, target.cluster, model=spec or target.doctor.settings.agent.model)
            answer = None
            for event in assistant.stream(args.question, session_id="cli", cancel=cancel):
                if isinstance(event, ToolFinished) and show_progress:
                    _progress(event, sys.stderr)
                elif isinstance(event, TurnFinished):
                    answer = event.answer
            assert answer is not None
            return assistant, answer

        assistant, answer = within(target.doctor, args.timeout, turn, sys.stderr if show_progress else None)
        if answer.approval is not None and args.format == "text" and _interactive():
            approval = _ask_approval(answer.approval, sys.stdout)
            answer = assistant.resume("cli", approval)
    if args.format == "json":
        sys.stdout.write(json.dumps(answer.to_json_dict(), indent=2, default=str) + "\n")
    else:
        width = _terminal_width(sys.stdout)
        sys.stdout.write((wrap(answer.answer, width) if width else answer.answer) + "\n")
    return 0


def _terminal_width(stream: TextIO) -> int | None:
    """The terminal's width when ``stream`` is one; None for a pipe or file (their lines stay whole for grep)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (OSError, ValueError, AttributeError):
        return None


def wrap(text: str, width: int) -> str:
    """Each line of an answer folded to ``width`` columns; a list item's continuation lines indented under its
    text, and long ids or URLs kept whole rather than cut."""
    width = max(width, 20)
    lines = []
    for line in text.splitlines():
        indent = re.match(r"\s*(?:[-*] |\d+\. )?", line)
        hang = " " * (len(indent.group(0)) if indent else 0)
        lines += textwrap.wrap(line, width, subsequent_indent=hang, break_long_words=False,
                               break_on_hyphens=False) or [""]
    return "\n".join(lines)


def _progress(event: Any, stream: TextIO) -> None:
    args = ", ".join(f"{k}={v}" for k, v in event.args.items())
    # a check tool says what it found; another (find_names, why_not) says what it answered
    outcome = plural(event.finding_count, "finding") if event.name.startswith("check") else event.message
    stream.write(f"fmdoctor: {event.name}({args}): {event.status}, {outcome} ({event.duration_s:.1f}s)\n")
    stream.flush()


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _ask_approval(request: Any, stream: TextIO) -> Any | None:
    """A person at this terminal decides, in the dialogue ``fmdoctor fix`` uses: the same plan, the same
    question, the same answers. The approval names the plan digest."""
    show_plan(request.plan, request.preflight, stream)
    if not confirm(request.plan):
        return None
    try:
        from fmdoctor.remediation.approval import Approval
    except ImportError as exc:  # the plan came from fmdoctor.remediation, so this means a broken install
        raise FmdoctorError("fmdoctor.remediation is not installed; cannot approve a fix") from exc
    return Approval(plan_digest=request.plan_digest, approver=getpass.getuser(), channel="cli",
                    granted_at=datetime.now(UTC))
