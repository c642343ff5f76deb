"""``fmdoctor eval``: the assistant's eval suite against the configured model, with the pass rate.

Every case runs on its own seeded cluster in moto (no AWS account; the demo extra); the model is the one
``fmdoctor ask`` would use. Exit status: 0 every case that ran passed, 1 some failed, 3 could not run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fmdoctor.cli.common import split_ids
from fmdoctor.config import load_settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="score the assistant on the eval questions",
                                   description="Ask every eval question on its seeded cluster and check the tools "
                                   "called and the finding ids cited; prints the pass rate.")
    parser.add_argument("--model", metavar="PROVIDER:MODEL", help="as for fmdoctor ask (default: FMDOCTOR_MODEL, "
                        "agent.model, else the offline planner)")
    parser.add_argument("--case", action="append", metavar="ID[,ID]", help="only these case ids or scenarios")
    parser.add_argument("--config", help="fmdoctor.yaml whose agent section to use")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--no-progress", action="store_true", help="do not show each case on stderr as it ends")
    parser.set_defaults(func=run)


def _progress(result: Any, done: int, total: int) -> None:
    """One line per case on stderr as it ends: a suite takes minutes, and stdout is kept for the table."""
    sys.stderr.write(f"fmdoctor: [{done}/{total}] {result.case}: {result.status} ({result.duration_s:.1f}s)\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from fmdoctor.assistant.evaluation import run_suite
    from fmdoctor.cli.ask_cmd import model_spec

    agent = load_settings(args.config).agent
    suite = run_suite(model_spec(args) or agent.model, agent, only=split_ids(args.case),
                      progress=None if args.no_progress else _progress)
    if args.format == "json":
        sys.stdout.write(json.dumps(suite.to_json_dict(), indent=2) + "\n")
    else:
        for result in suite.results:
            reasons = "; ".join(result.reasons)
            sys.stdout.write(f"{result.status.upper():4}  {result.case}" + (f": {reasons}" if reasons else "") + "\n")
        sys.stdout.write(suite.summary() + "\n")
    return 1 if suite.count("fail") else 0
