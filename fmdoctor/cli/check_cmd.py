"""``fmdoctor check``: one-shot diagnosis with monitoring-plugin exit codes (0 ok, 1 warning, 2 critical, 3 unknown)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target, split_ids
from fmdoctor.cli.progress import StderrProgress
from fmdoctor.config import load_settings
from fmdoctor.engine.api import Doctor
from fmdoctor.report import RENDERERS
from fmdoctor.report.text import make_console, write_text


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="run the checks against a cluster",
        description="Run deterministic checks against a cluster. Exit status: 0 ok, 1 warning, 2 critical, "
        "3 unknown (could not run).",
    )
    add_target_args(parser)
    add_connection_args(parser)
    parser.add_argument("--endpoint", action="append", metavar="NAME[,NAME]",
                        help="also check these SageMaker endpoints (repeatable); alone, check only them")
    parser.add_argument("--only", action="append", metavar="ID[,ID]",
                        help="run only these check ids or families (repeatable)")
    parser.add_argument("--format", choices=sorted(RENDERERS), default="text")
    parser.add_argument("--no-progress", action="store_true", help="never print progress on stderr")
    parser.add_argument("--local", action="store_true",
                        help="run the on-node checks on this machine (GPU driver, Xid errors, EFA provider, IMDS)")
    parser.add_argument("--checkpoint", action="append", metavar="URI",
                        help="checkpoint location: s3://bucket/prefix, fsx://fs-id/path or /abs/path (repeatable; "
                        "replaces checkpoints.locations)")
    parser.add_argument("--checkpoint-max-age", metavar="DURATION",
                        help="newest checkpoint allowed age, e.g. 90s, 30m, 2h (checkpoints.max_age)")
    parser.add_argument("--spot-queue", metavar="URL",
                        help="SQS queue an EventBridge rule feeds with Spot events (spot.queue_url)")
    parser.add_argument("--metrics-url", metavar="URL",
                        help="read GPU/EFA metrics from this Prometheus API (an AMP workspace URL is signed with "
                        "SigV4); overrides metrics.url and implies metrics.source prometheus")
    parser.set_defaults(func=run)


def settings_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Flags that override the cluster's settings for this run, as a nested settings mapping."""
    overrides: dict[str, Any] = {}
    checkpoints = {"locations": args.checkpoint, "max_age": args.checkpoint_max_age}
    if any(v is not None for v in checkpoints.values()):
        overrides["checkpoints"] = {k: v for k, v in checkpoints.items() if v is not None}
    if args.spot_queue:
        overrides["spot"] = {"queue_url": args.spot_queue}
    if getattr(args, "metrics_url", None):
        overrides["metrics"] = {"url": args.metrics_url, "source": "prometheus"}
    if getattr(args, "endpoint", None):
        overrides.setdefault("inference", {})["endpoints"] = split_ids(args.endpoint)
    return overrides


def run(args: argparse.Namespace) -> int:
    progress = StderrProgress(enabled=not args.no_progress)
    try:
        if args.local:
            doctor = Doctor(settings=load_settings(args.config), overrides=settings_from_flags(args))
            report = doctor.check_local(split_ids(args.only), progress)
        else:
            with open_target(args, settings_from_flags(args)) as target:
                for note in getattr(target.doctor.extras.get("demo"), "notes", ()):
                    sys.stderr.write(note + "\n")
                report = target.doctor.check(target.cluster, only=split_ids(args.only), progress=progress)
    finally:
        progress.close()
    if args.format == "text":
        write_text(report, make_console(sys.stdout))
    else:
        sys.stdout.write(RENDERERS[args.format](report) + "\n")
    return report.exit_code
