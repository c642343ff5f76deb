"""The ``fmdoctor`` command. Each sub-command lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from fmdoctor import __version__
from fmdoctor.cli import (
    ask_cmd,
    chat_cmd,
    check_cmd,
    checks_cmd,
    eval_cmd,
    export_cmd,
    fix_cmd,
    fleet_cmd,
    iam_policy_cmd,
    mcp_cmd,
    runbook_cmd,
    serve_cmd,
    slack_cmd,
    why_not_cmd,
)
from fmdoctor.cli.common import ArgumentParser
from fmdoctor.cli.deadline import abandoned
from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.safety.text import visible

COMMANDS = (check_cmd, checks_cmd, why_not_cmd, runbook_cmd, fix_cmd, iam_policy_cmd, ask_cmd, eval_cmd,
            fleet_cmd, export_cmd, mcp_cmd, slack_cmd, serve_cmd, chat_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="fmdoctor",
        description="Diagnose and safely fix foundation-model training and inference clusters on AWS.",
    )
    parser.add_argument("--version", action="version", version=f"fmdoctor {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log to stderr (-vv: debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
            format="fmdoctor: %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        if not getattr(args, "func", None):
            if not _interactive():  # scripts and pipes still get the help
                parser.print_help()
                return 0
            args = parser.parse_args(["chat"])  # a person at a terminal gets the app
        return int(args.func(args))
    except FmdoctorError as exc:
        sys.stderr.write(f"fmdoctor: error: {visible(exc.message, lines=False)}\n")
        if exc.hint:
            sys.stderr.write(f"  hint: {visible(exc.hint, lines=False)}\n")
        _json_failure(argv, type(exc).__name__, exc.message, exc.hint)
        return exc.exit_code
    except Terminated:
        sys.stderr.write("fmdoctor: terminated (SIGTERM)\n")
        _json_failure(argv, "Terminated", "the run was terminated (SIGTERM) before it finished", None)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        sys.stderr.write("fmdoctor: interrupted\n")
        _json_failure(argv, "Interrupted", "the run was interrupted (Ctrl-C) before it finished", None)
        return 130
    except BrokenPipeError:
        return 0
    except RecursionError:
        sys.stderr.write("fmdoctor: error: the input is nested too deeply to read\n")
        _json_failure(argv, "RecursionError", "the input is nested too deeply to read", None)
        return 3
    except Exception as exc:  # a bug, or input nothing anticipated: one line, never a traceback with its data
        logging.getLogger("fmdoctor").debug("unexpected error", exc_info=True)
        sys.stderr.write(f"fmdoctor: error: {type(exc).__name__}: {visible(str(exc), lines=False)[:300]}\n"
                         "  hint: this is a bug in fmdoctor or input it does not handle; run with -vv for the "
                         "traceback and report it\n")
        _json_failure(argv, type(exc).__name__, str(exc)[:300], None)
        return 3


class Terminated(KeyboardInterrupt):
    """SIGTERM (a pipeline's timeout, ``kill``): stops the run the way Ctrl-C does, so whatever cleans up after an
    interrupt runs, and ``--format json`` still gets its document."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _json_failure(argv: list[str], kind: str, message: str, hint: str | None) -> None:
    """``--format json`` always gets one JSON document on stdout, also when the run could not start or stopped
    (status unknown, exit 3): a pipeline never reads an empty report. ``--format`` is recognised as argparse
    reads it: also abbreviated (``--form json``, ``--fo=json``)."""
    wanted = any(_is_format(a.split("=", 1)[0]) and (a.split("=", 1)[1:] == ["json"] if "=" in a
                                                      else argv[i + 1:i + 2] == ["json"])
                 for i, a in enumerate(argv))
    if not wanted:
        return
    error = {"kind": kind, "message": visible(message, lines=False), "hint": visible(hint, lines=False) if hint
             else None}
    with contextlib.suppress(Exception):
        sys.stdout.write(json.dumps({"status": "unknown", "error": error, "findings": [], "errors": [],
                                     "incidents": []}, indent=2) + "\n")
        sys.stdout.flush()


# CPython's first-generation threshold is 700 allocations. A process that has made AWS clients holds botocore's
# parsed service models for good (EC2's alone is over 100,000 OrderedDicts), and moto's catalogues too under the
# demo; at 700, the young objects a run allocates pushed the collector into walking all of that again and again,
# a quarter of the CPU of `check --demo`. Collecting the youngest generation less often promotes fewer objects
# to the older ones, so the full walks become rare; cycles are still collected, a little later.
GC_FIRST_GENERATION_THRESHOLD = 20_000


def _is_format(flag: str) -> bool:
    return len(flag) > 3 and "--format".startswith(flag)


def collect_garbage_less_often() -> None:
    gc.set_threshold(GC_FIRST_GENERATION_THRESHOLD, *gc.get_threshold()[1:])


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def run() -> NoReturn:
    """The ``fmdoctor`` console script: :func:`main`, then exit without tearing the interpreter down.

    Work still under way in other threads is waited for, as a normal exit does (a fix being applied and
    audited finishes); what is skipped is freeing every object one by one, which after the demo (moto's whole
    in-memory AWS) took seconds after the last line was printed, so quitting the app felt stuck.
    """
    collect_garbage_less_often()
    with contextlib.suppress(ValueError):  # only the main thread may set a handler
        signal.signal(signal.SIGTERM, _terminate)
    code = main()
    for thread in threading.enumerate():  # calls a --timeout gave up on are not waited for (cli/deadline.py)
        if thread is not threading.main_thread() and not thread.daemon and not abandoned():
            thread.join()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
