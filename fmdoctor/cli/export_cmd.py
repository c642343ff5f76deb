"""``fmdoctor export cloudwatch``: put a check's (or a saved fleet scan's) verdicts into CloudWatch metrics."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.common import add_connection_args, add_target_args, open_target, split_ids
from fmdoctor.cli.progress import StderrProgress
from fmdoctor.engine.errors import UsageError

if TYPE_CHECKING:
    from fmdoctor.engine.model import Report
    from fmdoctor.export.cloudwatch import CloudWatchExport
    from fmdoctor.fleet.model import FleetReport

# fmdoctor.export.cloudwatch.IAM_ACTION (a test keeps them equal), named in --help without importing the engine.
IAM_ACTION = "cloudwatch:PutMetricData"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="publish verdicts to a monitoring system")
    sub = parser.add_subparsers(dest="export_command", metavar="TARGET")
    sub.required = True
    cloudwatch = sub.add_parser(
        "cloudwatch",
        help="put finding counts per cluster/check into CloudWatch metrics",
        description=f"Run the checks against a cluster (or read a saved 'check'/'fleet check' JSON report) and put "
        f"Findings{{Cluster,Check,Severity}}, CheckErrors{{Cluster,Check}} and Status{{Cluster}} into a CloudWatch "
        f"namespace. Writes metrics: needs {IAM_ACTION}. Exit status 0 when the metrics were put.",
    )
    add_target_args(cloudwatch)
    cloudwatch.add_argument("--report", metavar="FILE",
                            help="export this saved JSON report ('-' for stdin) instead of running the checks")
    cloudwatch.add_argument("--only", action="append", metavar="ID[,ID]", help="run only these checks or families")
    cloudwatch.add_argument("--namespace", help="CloudWatch namespace (default: export.cloudwatch_namespace, fmdoctor)")
    cloudwatch.add_argument("--dry-run", action="store_true", help="print the PutMetricData requests, send nothing")
    cloudwatch.add_argument("--no-progress", action="store_true", help="never print progress on stderr")
    add_connection_args(cloudwatch)
    cloudwatch.set_defaults(func=run_cloudwatch)


def run_cloudwatch(args: argparse.Namespace) -> int:
    from fmdoctor.config import load_settings
    from fmdoctor.engine.api import Connection, Doctor
    from fmdoctor.export.cloudwatch import export_to_cloudwatch

    if args.report:
        if args.cluster or args.demo or args.only:
            raise UsageError("--report exports a saved report: it does not take --cluster, --demo or --only")
        doctor = Doctor(settings=load_settings(args.config),
                        connection=Connection(region=args.region, profile=args.profile, endpoint_url=args.endpoint_url))
        result = export_to_cloudwatch(doctor, read_report(args.report), args.namespace, args.dry_run)
    else:
        progress = StderrProgress(enabled=not args.no_progress)
        with open_target(args) as target:
            try:
                report = target.doctor.check(target.cluster, only=split_ids(args.only), progress=progress)
            finally:
                progress.close()
            result = export_to_cloudwatch(target.doctor, report, args.namespace, args.dry_run)
    _print(result)
    return 0


def read_report(path: str) -> Report | FleetReport:
    from pydantic import ValidationError

    from fmdoctor.engine.model import Report
    from fmdoctor.fleet.model import FleetReport

    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()  # noqa: SIM115
        data: Any = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read report {path}: {exc}") from None
    try:
        if isinstance(data, dict) and "clusters" in data and "scopes" in data:
            return FleetReport.model_validate(data)
        return Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{path} is not an fmdoctor check or fleet JSON report ({where}: {first['msg']})") from None


def _print(result: CloudWatchExport) -> None:
    if result.dry_run:
        sys.stdout.write(json.dumps(result.to_json_dict(), indent=2) + "\n")
        return
    sys.stderr.write(f"fmdoctor: put {result.metrics} metrics into {result.namespace} ({result.region}) "
                     f"in {result.calls} PutMetricData calls\n")
