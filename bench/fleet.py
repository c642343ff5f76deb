"""Benchmark: a fleet scan of ACCOUNTS x REGIONS x CLUSTERS against moto, wall time and API calls.

    python bench/fleet.py            # 50 accounts x 4 regions x 3 clusters = 600 clusters
    python bench/fleet.py --quick    # 3 x 2 x 2, a CI smoke test (a few seconds)

moto answers in-process, in microseconds of I/O but with real CPU cost under one GIL, so a network
round trip is simulated: every HTTP attempt waits ``--latency-ms`` first (sleeping, as a socket does,
so other threads run). Reported against two references from the same run:

- the baseline: the same scan with concurrency 1 over the first ``--baseline-accounts`` accounts,
  compared as throughput (clusters per second), since it covers fewer clusters;
- the lower bound of API calls: 1 GetCallerIdentity + 1 AssumeRole per account + 2 listings per
  account/region (DescribeInstances, ListClusters) + per cluster what a standalone ``fmdoctor check`` of
  it makes (measured in the same run; every cluster here has the same shape, every listing one page).

The process exits non-zero if any cluster is not reported, a scope failed, or the calls exceed the bound.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fmdoctor.config import Settings  # noqa: E402
from fmdoctor.demo.fleet import EGRESS_MISSING, OUTSIDE_PLACEMENT, account_ids, seed_fleet  # noqa: E402
from fmdoctor.demo.runtime import LEAN_MOTO_ENV, mocked_aws  # noqa: E402
from fmdoctor.engine.api import Connection, Doctor, new_aws  # noqa: E402
from fmdoctor.engine.aws import AwsOptions  # noqa: E402
from fmdoctor.fleet import FleetReport, build_plan, scan_fleet  # noqa: E402
from fmdoctor.fleet.sessions import assume_role  # noqa: E402

REGION_POOL = ["us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1",
               "ap-southeast-2", "eu-north-1"]


@dataclass
class Run:
    label: str
    accounts: int
    concurrency: int
    report: FleetReport
    wall_s: float

    @property
    def clusters_per_s(self) -> float:
        return len(self.report.clusters) / self.wall_s


def latency_factory(latency_s: float) -> Any:
    def sleep_first(**_: Any) -> None:
        time.sleep(latency_s)  # a round trip; returning None lets moto answer

    def factory(scope: Any, options: Any, credentials: Any) -> Any:
        aws = new_aws(options, credentials)
        if latency_s:
            aws.session.events.register_first("before-send", sleep_first)
        return aws

    return factory


def scan(accounts: list[str], regions: list[str], concurrency: int, latency_s: float, label: str) -> Run:
    doctor = Doctor(settings=Settings())
    plan = build_plan(doctor.settings, regions=regions, accounts=accounts)
    started = time.perf_counter()
    report = scan_fleet(doctor, plan, concurrency=concurrency, session_factory=latency_factory(latency_s))
    return Run(label, len(accounts), concurrency, report, time.perf_counter() - started)


def lower_bound(accounts: int, scopes: int, clusters: int, per_cluster: int) -> int:
    return 1 + accounts + 2 * scopes + per_cluster * clusters


def standalone_check_calls(account: str, region: str, cluster: str) -> int:
    """API calls of one ``fmdoctor check`` of the cluster, outside any fleet scan."""
    credentials = assume_role(new_aws(AwsOptions(region=region)), f"arn:aws:iam::{account}:role/fmdoctor-read-only")
    doctor = Doctor(settings=Settings(), connection=Connection(region=region),
                    aws_factory=lambda options: new_aws(options, credentials))
    return sum(doctor.check(cluster).stats.api_calls.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 accounts x 2 regions x 2 clusters (CI smoke test)")
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--regions", type=int, default=4)
    parser.add_argument("--clusters", type=int, default=3, help="clusters per account/region")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="simulated round trip per HTTP attempt")
    parser.add_argument("--baseline-accounts", type=int, default=5, help="accounts in the concurrency-1 baseline")
    args = parser.parse_args(argv)
    if args.quick:
        args.accounts, args.regions, args.clusters, args.baseline_accounts = 3, 2, 2, 1
    accounts = account_ids(args.accounts)
    regions = REGION_POOL[: args.regions]
    latency_s = args.latency_ms / 1000

    with mocked_aws(extra_env=LEAN_MOTO_ENV) as session:
        started = time.perf_counter()
        faults = {(a, regions[0], "c0"): EGRESS_MISSING for a in accounts[::10]}
        faults.update({(a, regions[-1], "c1"): OUTSIDE_PLACEMENT for a in accounts[5::10]})
        world = seed_fleet(session, accounts, regions, args.clusters, faults)
        seeded_s = time.perf_counter() - started
        print(f"seeded {len(world.clusters)} clusters ({args.accounts} accounts x {args.regions} regions x "
              f"{args.clusters}) in {seeded_s:.1f}s; simulated latency {args.latency_ms:g} ms per call")
        scan(accounts[:1], regions[:1], 1, 0, "warm-up")  # load the service models once, outside the timings
        per_cluster = standalone_check_calls(accounts[0], regions[0], "c1")
        baseline = scan(accounts[: args.baseline_accounts], regions, 1, latency_s, "baseline (concurrency 1)")
        full = scan(accounts, regions, args.concurrency, latency_s, f"fleet (concurrency {args.concurrency})")

    problems = []
    print(f"\n{'run':<28}{'clusters':>9}{'wall s':>9}{'clusters/s':>12}{'API calls':>11}{'lower bound':>13}")
    for run in (baseline, full):
        scopes = run.accounts * len(regions)
        bound = lower_bound(run.accounts, scopes, len(run.report.clusters), per_cluster)
        calls = run.report.stats.api_calls_total
        print(f"{run.label:<28}{len(run.report.clusters):>9}{run.wall_s:>9.2f}{run.clusters_per_s:>12.1f}"
              f"{calls:>11}{bound:>13}")
        if calls > bound:
            problems.append(f"{run.label}: {calls} calls exceed the lower bound {bound}")
        if run.report.failed_scopes():
            problems.append(f"{run.label}: {len(run.report.failed_scopes())} scopes failed")
    expected = {key: world.expected_status(fault) for key, fault in world.clusters.items()}
    got = {(c.account, c.region, c.cluster): c.status.value for c in full.report.clusters}
    if got != expected:
        problems.append(f"verdicts differ from the seeded faults for {len(set(got.items()) ^ set(expected.items()))}")
    print(f"\nspeed-up over the baseline: {full.clusters_per_s / baseline.clusters_per_s:.1f}x throughput at "
          f"concurrency {args.concurrency}; a standalone check of one cluster makes {per_cluster} calls")
    print(f"fleet verdict: {full.report.status.value} ({full.report.summary()['clusters_by_status']})")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
