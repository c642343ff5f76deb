"""``fmdoctor fleet check``: every cluster of many accounts and regions, one summary, the worst exit status."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fmdoctor.cli.common import add_connection_args, split_ids
from fmdoctor.cli.progress import ProgressLine
from fmdoctor.engine.errors import UsageError

if TYPE_CHECKING:
    from fmdoctor.config import Settings
    from fmdoctor.engine.api import Doctor
    from fmdoctor.fleet import FleetEvent, FleetPlan

# The names of fmdoctor.report.fleet.FLEET_RENDERERS (a test keeps them equal): registering --format must not
# import the fleet scanner, the engine and rich.
FORMATS = ("json", "markdown", "prometheus", "text")


def _shard(value: str) -> Any:
    """--shard INDEX/COUNT, parsed by fmdoctor.fleet.parse_shard (imported when the flag is given)."""
    from fmdoctor.fleet import parse_shard

    return parse_shard(value)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fleet", help="check every cluster across accounts and regions")
    sub = parser.add_subparsers(dest="fleet_command", metavar="COMMAND")
    sub.required = True
    check = sub.add_parser(
        "check",
        help="discover and check every cluster of the accounts and regions",
        description="Discover clusters (configured tag keys, ParallelCluster tags, HyperPod) in every account and "
        "region, assuming a read-only role per account, and check each. Exit status: the worst over the fleet "
        "(0 ok, 1 warning, 2 critical, 3 unknown: a scope or cluster could not be checked).",
    )
    accounts = check.add_mutually_exclusive_group()
    accounts.add_argument("--accounts", metavar="FILE",
                          help="accounts to scan: YAML (accounts: [{id, role_name, role_arn, regions, external_id}]) "
                          "or one account id per line")
    accounts.add_argument("--account-ids", metavar="ID[,ID]", action="append", help="accounts to scan (repeatable)")
    accounts.add_argument("--org", action="store_true",
                          help="scan every active account of the organization (organizations:ListAccounts)")
    check.add_argument("--regions", metavar="R[,R]", action="append",
                       help="regions to scan (default: fleet.regions, else the one region)")
    check.add_argument("--role-name", help="role to assume in each account (default: fleet.role_name, "
                       "fmdoctor-read-only)")
    check.add_argument("--external-id", help="ExternalId for AssumeRole, when the roles' trust policies ask for one")
    check.add_argument("--shard", metavar="INDEX/COUNT", type=_shard,
                       help="scan only this shard of the accounts, e.g. $JOB_COMPLETION_INDEX/4")
    check.add_argument("--concurrency", type=int, metavar="N", help="clusters checked at once (default 8)")
    check.add_argument("--only", action="append", metavar="ID[,ID]", help="run only these checks or families")
    check.add_argument("--no-hyperpod", action="store_true", help="do not list SageMaker HyperPod clusters")
    check.add_argument("--format", choices=FORMATS, default="text")
    check.add_argument("--no-progress", action="store_true", help="never print progress on stderr")
    check.add_argument("--demo", action="store_true",
                       help="scan an embedded demo fleet (moto in-process; 2 accounts x 2 regions x 2 clusters)")
    add_connection_args(check)
    for action in check._actions:
        if action.dest == "region":
            action.help = "where STS and Organizations are called (default: the first of --regions)"
    check.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fmdoctor.fleet import scan_fleet
    from fmdoctor.report.fleet import FLEET_RENDERERS, write_fleet_text
    from fmdoctor.report.text import make_console

    if args.concurrency is not None and not 1 <= args.concurrency <= 64:
        raise UsageError("--concurrency must be between 1 and 64")
    progress = FleetProgressLine(enabled=not args.no_progress)
    with _doctor_and_plan(args) as (doctor, plan):
        try:
            fleet = scan_fleet(doctor, plan, only=split_ids(args.only), concurrency=args.concurrency,
                               progress=progress)
        finally:
            progress.close()
    if args.format == "text":
        write_fleet_text(fleet, make_console(sys.stdout))
    else:
        sys.stdout.write(FLEET_RENDERERS[args.format](fleet) + "\n")
    return fleet.exit_code


@contextlib.contextmanager
def _doctor_and_plan(args: argparse.Namespace) -> Iterator[tuple[Doctor, FleetPlan]]:
    from fmdoctor.config import Settings, load_settings
    from fmdoctor.engine.api import Connection, Doctor
    from fmdoctor.fleet import build_plan

    if args.demo:
        from fmdoctor.demo.fleet import DEMO_REGIONS, seed_demo_fleet
        from fmdoctor.demo.runtime import LEAN_MOTO_ENV, mocked_aws

        with mocked_aws(extra_env=LEAN_MOTO_ENV) as session:
            world = seed_demo_fleet(session)
            settings = _with_flags(Settings(), args)
            yield Doctor(settings=settings), build_plan(settings, regions=DEMO_REGIONS, accounts=world.accounts)
        return
    settings = _with_flags(load_settings(args.config), args)
    region = args.region or os.environ.get("FMDOCTOR_REGION")
    plan = build_plan(settings, connection_region=region, regions=split_ids(args.regions, "--regions"),
                      accounts_file=args.accounts, accounts=split_ids(args.account_ids, "--account-ids"),
                      organization=args.org,
                      role_name=args.role_name, external_id=args.external_id, shard=args.shard, home_region=region)
    yield Doctor(settings=settings, connection=Connection(profile=args.profile, endpoint_url=args.endpoint_url)), plan


def _with_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    if not args.no_hyperpod:
        return settings
    return settings.model_copy(update={"fleet": settings.fleet.model_copy(update={"hyperpod": False})})


class FleetProgressLine(ProgressLine):
    """One line per cluster checked; the total grows while discovery goes on."""

    def __call__(self, event: FleetEvent) -> None:
        if self.wanted():
            self.write(f"fmdoctor: [{event.done}/{event.total}] {event.account} {event.region} {event.cluster}: "
                       f"{event.status.value}")
