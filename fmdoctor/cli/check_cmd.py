"""``fmdoctor check``: one-shot diagnosis with monitoring-plugin exit codes (0 ok, 1 warning, 2 critical, 3 unknown)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target, split_ids
from fmdoctor.cli.deadline import add_timeout_arg, within
from fmdoctor.cli.progress import StderrProgress, starting
from fmdoctor.engine.errors import UsageError

if TYPE_CHECKING:
    from fmdoctor.engine.host import Host
    from fmdoctor.engine.model import Report

# The names of fmdoctor.report.RENDERERS (a test keeps them equal): registering --format must not import the
# renderers, the engine and rich.
FORMATS = ("json", "markdown", "prometheus", "text")


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
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--no-progress", action="store_true", help="never print progress on stderr")
    add_timeout_arg(parser)
    parser.add_argument("--local", action="store_true",
                        help="run the on-node checks on this machine (GPU driver, Xid errors, EFA provider, IMDS)")
    parser.add_argument("--record", metavar="DIR",
                        help="with --local: also write every command output, file and IMDS answer the node gave to DIR "
                        "(to replay the verdicts elsewhere with --replay DIR)")
    parser.add_argument("--replay", metavar="DIR",
                        help="run the on-node checks on the outputs recorded in DIR by --record, not on this machine")
    parser.add_argument("--checkpoint", action="append", metavar="URI",
                        help="checkpoint location: s3://bucket/prefix, fsx://fs-id/path or /abs/path (repeatable; "
                        "replaces checkpoints.locations)")
    parser.add_argument("--checkpoint-max-age", metavar="DURATION",
                        help="newest checkpoint allowed age, e.g. 90s, 30m, 2h (checkpoints.max_age)")
    parser.add_argument("--spot-queue", metavar="URL",
                        help="SQS queue an EventBridge rule feeds with Spot events (spot.queue_url)")
    parser.add_argument("--scheduler", choices=("auto", "slurm", "kubernetes", "none"),
                        help="the scheduler whose nodes and jobs to read (overrides scheduler.kind; auto: found from "
                             "the cluster's tags/log groups, a local sinfo, or EKS)")
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
    if getattr(args, "scheduler", None):
        overrides["scheduler"] = {"kind": args.scheduler}
    if getattr(args, "metrics_url", None):
        overrides["metrics"] = {"url": args.metrics_url, "source": "prometheus"}
    if getattr(args, "endpoint", None):
        overrides.setdefault("inference", {})["endpoints"] = split_ids(args.endpoint, "--endpoint")
    return overrides


def run(args: argparse.Namespace) -> int:
    from fmdoctor.engine.registry import default_registry
    from fmdoctor.report import RENDERERS
    from fmdoctor.report.text import make_console, write_text

    if args.record and not (args.local or args.replay):
        raise UsageError("--record DIR records what the node answers: use it with --local")
    progress = StderrProgress(enabled=not args.no_progress)
    try:
        if args.local or args.replay or args.record:
            report = _check_node(args, progress)
        else:
            default_registry().select(split_ids(args.only))  # an unknown id: exit 3 before the demo is seeded
            with open_target(args, settings_from_flags(args)) as target:
                for note in getattr(target.doctor.extras.get("demo"), "notes", ()):
                    sys.stderr.write(note + "\n")
                if not args.no_progress:
                    starting(target.doctor, target.cluster, "checking", sys.stderr)
                doctor, only = target.doctor, split_ids(args.only)
                report = within(doctor, args.timeout, lambda cancel: doctor.check(
                    target.cluster, only=only, progress=progress, cancel=cancel), sys.stderr)
    finally:
        progress.close()
    if args.format == "text":
        write_text(report, make_console(sys.stdout))
    else:
        sys.stdout.write(RENDERERS[args.format](report) + "\n")
    return report.exit_code


def _check_node(args: argparse.Namespace, progress: StderrProgress) -> Report:
    """On-node checks on this machine, a --replay recording, or (--local --demo) the demo node's recording."""
    from fmdoctor.config import load_settings
    from fmdoctor.engine.api import Doctor
    from fmdoctor.engine.host import LocalHost
    from fmdoctor.node import recording

    doctor = Doctor(settings=load_settings(args.config), overrides=settings_from_flags(args))
    host: Host
    source = args.replay or (demo_recording() if getattr(args, "demo", False) else None)
    if source:
        try:
            host, recorded_at = recording.load(Path(source))
        except recording.RecordingError as exc:
            raise UsageError(str(exc),
                             hint="pass a directory written by 'fmdoctor check --local --record DIR'") from None
        doctor.clock = lambda: recorded_at
    else:
        host = LocalHost()
    recorder = recording.RecordingHost(host) if args.record else None
    try:
        writer = recording.open_directory(Path(args.record)) if args.record else None  # refused before the run
    except recording.RecordingError as exc:
        raise UsageError(f"--record: {exc}", hint="give a new directory (it is created 0700)") from None
    report = doctor.check_local(split_ids(args.only), progress, host=recorder or host)
    if recorder and writer:
        try:
            recorder.save(writer, report.generated_at)
        except recording.RecordingError as exc:
            raise UsageError(f"--record: {exc}") from None
    return report


def demo_recording() -> Path:
    """The demo GPU node's recorded outputs, shipped with the package (a p5.48xlarge with faults)."""
    from importlib import resources

    return Path(str(resources.files("fmdoctor.demo").joinpath("node")))
