"""``fmdoctor eval``: the assistant's eval suite against one or more models, as a table to choose a model by.

Every case runs on its own seeded cluster in moto (no AWS account; the demo extra); each model is one
``fmdoctor ask`` would use. Per case: status, tokens (input/output, the provider's numbers where it reports
them, else estimated and marked ``~``), latency and the tools called; per model: pass rate, tokens,
latency (median and 95th percentile) and a cost estimate from ``agent.prices`` (US dollars per million
tokens). Exit status: 0 every case that ran passed, 1 some failed, 3 could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.common import split_ids

if TYPE_CHECKING:
    from fmdoctor.config import AgentSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="score the assistant on the eval questions",
                                   description="Ask every eval question on its seeded cluster and check the tools "
                                   "called and the finding ids cited; prints pass rate, tokens, latency and cost "
                                   "per model.")
    parser.add_argument("--model", action="append", metavar="PROVIDER:MODEL[,...]",
                        help="as for fmdoctor ask, repeatable to compare models (default: FMDOCTOR_MODEL, "
                        "agent.model, else the offline planner)")
    parser.add_argument("--case", action="append", metavar="ID[,ID]", help="only these case ids or scenarios")
    parser.add_argument("--config", help="fmdoctor.yaml whose agent section (model, base_url, prices) to use")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.add_argument("--no-progress", action="store_true", help="do not show each case on stderr as it ends")
    parser.set_defaults(func=run)


def _progress(result: Any, done: int, total: int) -> None:
    """One line per case on stderr as it ends: a suite takes minutes, and stdout is kept for the table."""
    sys.stderr.write(f"fmdoctor: [{done}/{total}] {result.case}: {result.status} ({result.duration_s:.1f}s)\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    from fmdoctor.assistant.evaluation import run_suite
    from fmdoctor.config import load_settings

    agent = load_settings(args.config).agent
    models = split_ids(args.model) or [os.environ.get("FMDOCTOR_MODEL") or agent.model or "offline"]
    suites = [run_suite(model, agent, only=split_ids(args.case), progress=None if args.no_progress else _progress)
              for model in models]
    if args.format == "json":
        data = [s.to_json_dict(agent.price_of(s.spec)) for s in suites]
        sys.stdout.write(json.dumps(data[0] if len(data) == 1 else data, indent=2) + "\n")
    else:
        for suite in suites:
            sys.stdout.write(case_table(suite) + "\n\n")
        sys.stdout.write(model_table(suites, agent) + "\n")
    return 1 if any(s.count("fail") for s in suites) else 0


def _tokens(count: int, source: str) -> str:
    return ("~" if source in ("estimate", "mixed") else "") + f"{count:,}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             .rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def case_table(suite: Any) -> str:
    rows = []
    for r in suite.results:
        reasons = "; ".join(r.reasons)
        tokens = f"{_tokens(r.input_tokens, r.usage_source)}/{_tokens(r.output_tokens, r.usage_source)}"
        rows.append([r.status.upper(), r.case, tokens if r.status != "skip" else "-",
                     f"{r.duration_s:.1f}" if r.status != "skip" else "-",
                     ",".join(dict.fromkeys(r.tools)) + (f": {reasons}" if reasons else "")])
    return f"model {suite.spec}\n" + _table(["STATUS", "CASE", "TOKENS IN/OUT", "SECONDS", "TOOLS / WHY"], rows, {2, 3})


def model_table(suites: list[Any], agent: AgentSettings) -> str:
    rows = []
    for s in suites:
        cost = s.cost(agent.price_of(s.spec))
        ran = max(len(s.ran), 1)
        rows.append([s.spec, f"{s.count('pass')}/{len(s.ran)}", f"{s.pass_rate:.1%}", str(s.count("skip")),
                     _tokens(s.input_tokens // ran, s.usage_source), _tokens(s.output_tokens // ran, s.usage_source),
                     f"{s.latency(0.5):.1f}", f"{s.latency(0.95):.1f}",
                     "n/a (no agent.prices entry)" if cost is None else f"${cost:.4f} (${cost / ran:.5f}/case)"])
    header = ["MODEL", "PASSED", "PASS RATE", "SKIPPED", "IN TOKENS/CASE", "OUT TOKENS/CASE", "P50 S", "P95 S",
              "COST"]
    note = ("\n~ estimated at 4 characters a token: the model reported no usage" if
            any(s.usage_source in ("estimate", "mixed") for s in suites) else "")
    return _table(header, rows, {1, 2, 3, 4, 5, 6, 7}) + note
