"""``fmdoctor chat`` (and ``fmdoctor`` alone at a terminal): the interactive Textual app.

Ask questions, watch checks run, read runbooks and approve or reject fixes; ``--demo`` runs it against the
embedded demo cluster. Textual and the assistant are imported only when the app starts.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from fmdoctor.cli.ask_cmd import model_spec
from fmdoctor.cli.common import add_connection_args, add_target_args, open_target, split_ids
from fmdoctor.cli.progress import ProgressLine
from fmdoctor.engine.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="interactive terminal app: chat, findings, runbooks, fixes (the default at a terminal)",
        description="Open the interactive app: ask the assistant, watch the checks run, read a finding's "
        "runbook, approve or reject fixes. Try 'fmdoctor chat --demo'.",
    )
    add_target_args(parser)
    add_connection_args(parser)
    parser.add_argument("--model", metavar="PROVIDER:MODEL", help="a provider string, e.g. openai:gpt-4o-mini; "
                        "default FMDOCTOR_MODEL, then agent.model, then the offline planner")
    parser.add_argument("--only", action="append", metavar="ID[,ID]", help="run only these checks or families")
    parser.add_argument("--audit-log", metavar="FILE", help="JSONL audit log of fixes (default: $FMDOCTOR_AUDIT_LOG, "
                        "else $XDG_STATE_HOME/fmdoctor/audit.jsonl)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fmdoctor.assistant import Assistant
    from fmdoctor.assistant.providers import aws_services
    from fmdoctor.engine.registry import default_registry
    from fmdoctor.remediation.audit import AuditLog
    from fmdoctor.tui.app import FmdoctorApp

    spec = model_spec(args)
    if args.demo and aws_services(spec):
        raise ConfigError(f"--demo runs AWS in-process with fake credentials, so {spec} cannot be called from it",
                          hint="use --demo with a model outside AWS, or the offline planner")
    only = split_ids(args.only)
    default_registry().select(only)  # an unknown check id: exit 3 now, before the demo is seeded
    notice = ProgressLine(delay_s=0)  # on a terminal the line is cleared once the demo is ready
    if args.demo:
        notice.write("fmdoctor: seeding the demo cluster in moto (a few seconds)…")
    try:
        with open_target(args) as target:
            notice.close()
            doctor = target.doctor
            assistant = Assistant(doctor, target.cluster, model=spec or doctor.settings.agent.model)
            audit = AuditLog(args.audit_log) if args.audit_log else None
            app = FmdoctorApp(doctor, target.cluster, assistant, audit=audit, only=only,
                              transcript_dir=Path.cwd())
            _run_without_stderr_logging(app)
    except ConfigError as exc:
        if exc.message == "no cluster given":
            exc.hint = f"{exc.hint}; or try 'fmdoctor chat --demo'"
        raise
    finally:
        notice.close()
    return 0


def _run_without_stderr_logging(app: object) -> None:
    """While the app draws on the terminal, log records go to Textual's log, not through the screen."""
    from textual.logging import TextualHandler

    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [TextualHandler()]
    logging.captureWarnings(True)
    try:
        app.run()  # type: ignore[attr-defined]
    finally:
        logging.captureWarnings(False)
        root.handlers = saved
