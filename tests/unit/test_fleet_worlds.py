"""Fleet scans of small worlds made for one test each (HyperPod, Organizations, the caller's own account,
the bounded pool); the shared three-account fleet is in test_fleet_scan.py."""

from __future__ import annotations

import threading
import time

import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.fleet import account_ids, seed_fleet, seed_hyperpod
from fmdoctor.demo.runtime import LEAN_MOTO_ENV
from fmdoctor.engine.api import Doctor, new_aws
from fmdoctor.engine.check import Check
from fmdoctor.engine.errors import CredentialsError, UsageError
from fmdoctor.engine.model import Severity, Status
from fmdoctor.engine.registry import Registry
from fmdoctor.fleet import Scope, build_plan, scan_fleet
from fmdoctor.fleet.discovery import HYPERPOD, TAGGED, DiscoveredCluster
from fmdoctor.fleet.scan import cluster_overrides

ACCOUNTS = account_ids(2)


@pytest.fixture(autouse=True)
def _lean_moto(monkeypatch):
    for key, value in LEAN_MOTO_ENV.items():
        monkeypatch.setenv(key, value)


def scan(accounts=ACCOUNTS, regions=("us-west-2",), doctor=None, **kwargs):
    doctor = doctor or Doctor(settings=Settings())
    return scan_fleet(doctor, build_plan(doctor.settings, regions=regions, accounts=accounts), **kwargs)


def by_key(report):
    return {(c.account, c.region, c.cluster): c for c in report.clusters}


def test_hyperpod_clusters_are_discovered_and_checked_by_their_name(aws):
    seed_fleet(aws, ACCOUNTS[:1], ["us-west-2"], 1)
    seed_hyperpod(aws, ACCOUNTS[0], "us-west-2", "hp-train")
    report = scan(accounts=ACCOUNTS[:1], regions=["us-west-2"])
    clusters = by_key(report)
    hyperpod = clusters[(ACCOUNTS[0], "us-west-2", "hp-train")]
    assert hyperpod.kinds == [HYPERPOD] and hyperpod.instances == 0
    assert clusters[(ACCOUNTS[0], "us-west-2", "c0")].status == Status.OK
    # Its nodes are not EC2 instances of the account: an engine that cannot read HyperPod nodes says so
    # (unknown, never 'ok'); one that can returns a report of the HyperPod cluster itself.
    if hyperpod.report is None:
        assert hyperpod.status == Status.UNKNOWN and hyperpod.error.message.startswith("HyperPod cluster")
    else:
        assert hyperpod.report.cluster == "hp-train" and hyperpod.status == hyperpod.report.status


def test_discovered_clusters_are_checked_where_discovery_found_them():
    doctor = Doctor(settings=Settings.model_validate({"tag_keys": ["fmdoctor:cluster"]}))
    tagged = DiscoveredCluster("a", (TAGGED,), 2, ("fmdoctor:cluster", "team:cluster"))
    assert cluster_overrides(doctor, tagged) == {"tag_keys": ["fmdoctor:cluster", "team:cluster"]}
    assert cluster_overrides(doctor, DiscoveredCluster("hp", (HYPERPOD,))) == {"hyperpod": {"cluster_name": "hp"}}
    named = Doctor(settings=Settings.model_validate({"clusters": {"hp": {"hyperpod": {"cluster_name": "other"}}}}))
    assert cluster_overrides(named, DiscoveredCluster("hp", (HYPERPOD,))) == {}


def test_hyperpod_listing_can_be_turned_off(aws):
    seed_hyperpod(aws, ACCOUNTS[0], "us-west-2", "hp-train")
    settings = Settings.model_validate({"fleet": {"hyperpod": False}})
    report = scan(accounts=ACCOUNTS[:1], regions=["us-west-2"], doctor=Doctor(settings=settings))
    assert report.clusters == [] and "sagemaker.ListClusters" not in report.stats.api_calls
    assert report.status == Status.UNKNOWN  # nothing found, nothing verified


def test_own_account_without_roles(aws):
    seed_fleet(aws, ["123456789012"], ["us-west-2"], 1)  # moto's default account: the caller's own
    report = scan(accounts=None, regions=["us-west-2"])
    assert [(c.account, c.status) for c in report.clusters] == [("123456789012", Status.OK)]
    assert "sts.AssumeRole" not in report.stats.api_calls


def test_organization_accounts(aws):
    org = aws.client("organizations", region_name="us-east-1")
    org.create_organization(FeatureSet="ALL")
    member = org.create_account(AccountName="research", Email="r@example.com")["CreateAccountStatus"]["AccountId"]
    seed_fleet(aws, [member], ["us-west-2"], 1)
    doctor = Doctor(settings=Settings())
    plan = build_plan(doctor.settings, regions=["us-west-2"], organization=True)
    report = scan_fleet(doctor, plan)
    assert report.accounts == 2  # the management account and the member
    assert [(c.account, c.cluster) for c in report.clusters] == [(member, "c0")]
    assert report.stats.api_calls["organizations.ListAccounts"] == 1


def test_no_source_credentials_stops_before_any_scope(aws, faults):
    faults.fail("sts", "GetCallerIdentity", "InvalidClientTokenId", "The security token is invalid.", 403)
    opened = []

    def factory(scope, options, credentials):
        opened.append(scope)
        return faults.attach(new_aws(options, credentials))

    with pytest.raises(CredentialsError, match="source credentials"):
        scan(session_factory=factory)
    assert opened == [Scope(None, "us-west-2")]


class _ConcurrencyProbe(Check):
    """Passes after waiting for two other clusters' probes to run alongside it."""

    id = "concurrency-probe"
    family = "test"
    severity = Severity.INFO
    iam_actions = ()
    lock = threading.Lock()
    running = 0
    peak = 0
    barrier = threading.Barrier(3, timeout=10)

    def run(self, ctx):
        cls = type(self)
        with cls.lock:
            cls.running += 1
            cls.peak = max(cls.peak, cls.running)
        try:
            cls.barrier.wait()  # proves three clusters run at once
            time.sleep(0.05)  # room for a fourth to start, were the pool unbounded
        finally:
            with cls.lock:
                cls.running -= 1
        return []


def test_cluster_checks_run_concurrently_and_bounded(aws):
    seed_fleet(aws, ACCOUNTS[:2], ["us-west-2"], 3, nodes=1)
    doctor = Doctor(settings=Settings(), registry=Registry([_ConcurrencyProbe]))
    report = scan(accounts=ACCOUNTS[:2], regions=["us-west-2"], doctor=doctor, concurrency=3)
    assert [c.status for c in report.clusters] == [Status.OK] * 6
    assert _ConcurrencyProbe.peak == 3 and report.stats.concurrency == 3


def test_unknown_check_fails_before_any_call(aws):
    with pytest.raises(UsageError):
        scan(only=["no-such-check"])
