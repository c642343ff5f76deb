"""``fmdoctor iam-policy [--remediation]``: the least-privilege IAM policy the checks (and fixes) need."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from fmdoctor.cli.common import split_ids

if TYPE_CHECKING:
    from fmdoctor.engine.check import Check


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "iam-policy",
        help="print the least-privilege IAM policy the checks (and, with --remediation, the fixes) need",
        description="Print an IAM policy document (JSON) derived from the actions each check declares; with "
        "--remediation, also what 'fmdoctor fix' needs for the automated fixes of those checks' runbooks.",
    )
    parser.add_argument("--remediation", action="store_true", help="add the actions of the automated fixes")
    parser.add_argument("--serve", action="store_true",
                        help="add what 'fmdoctor serve' needs: its SQS queue, SNS topic and dedupe table "
                        "(serve: in the config)")
    parser.add_argument("--only", action="append", metavar="ID[,ID]", help="only these check ids or families")
    parser.add_argument("--partition", default="aws", help="ARN partition (aws-cn, aws-us-gov); default aws")
    parser.add_argument("--config", help="fmdoctor.yaml to read (its runbooks_dir may override runbooks)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fmdoctor.config import load_settings
    from fmdoctor.iam_policy import iam_policy, serve_grants
    from fmdoctor.runbooks import list_runbooks

    checks = _selected(split_ids(args.only))
    settings = load_settings(args.config)
    runbooks = list_runbooks(settings) if args.remediation else []
    extra, warnings = (serve_grants(settings.serve.queue_url, settings.serve.sns_topic_arn, args.partition,
                                    settings.serve.dedupe_table)
                       if args.serve else ([], []))
    policy, more = iam_policy(checks, runbooks, remediation=args.remediation, partition=args.partition, extra=extra)
    warnings += more
    for warning in warnings:
        sys.stderr.write(f"fmdoctor: warning: {warning}\n")
    sys.stdout.write(json.dumps(policy, indent=2) + "\n")
    return 0


def _selected(only: list[str] | None) -> list[Check]:
    """Checks by id or family, cluster and node checks alike (the policy covers both modes)."""
    from fmdoctor.engine.registry import default_registry

    registry = default_registry()
    if not only:
        return list(registry)
    chosen = []
    for name in only:
        matched = [c for c in registry if name in (c.id, c.family)] or [registry.get(name)]  # get: UsageError
        chosen += [c for c in matched if c not in chosen]
    return chosen
