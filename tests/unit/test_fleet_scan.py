"""Fleet scans against moto's multi-account backends: moto maps an assumed role's keys to the account
in the role ARN, so every account here is reached exactly as in AWS, through sts:AssumeRole."""

from __future__ import annotations

from collections import Counter

import boto3
import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.fleet import EGRESS_MISSING, OUTSIDE_PLACEMENT, account_ids, seed_fleet
from fmdoctor.demo.runtime import LEAN_MOTO_ENV
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import AwsOptions
from fmdoctor.engine.errors import UsageError
from fmdoctor.engine.model import Status
from fmdoctor.fleet import Scope, build_plan, scan_fleet
from fmdoctor.fleet.discovery import TAGGED
from fmdoctor.fleet.sessions import assume_role

FAKE_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-west-2",
            "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", **LEAN_MOTO_ENV}
REGIONS = ["us-west-2", "eu-west-1"]
ACCOUNTS = account_ids(3)
BROKEN = {(ACCOUNTS[0], "us-west-2", "c1"): EGRESS_MISSING, (ACCOUNTS[1], "eu-west-1", "c0"): OUTSIDE_PLACEMENT}


@pytest.fixture(scope="module")
def fleet():
    """One fleet for the module (scans only read it): 3 accounts x 2 regions x 2 clusters."""
    from moto import mock_aws

    with pytest.MonkeyPatch.context() as env, mock_aws():
        for key, value in FAKE_ENV.items():
            env.setenv(key, value)
        yield seed_fleet(boto3.Session(region_name="us-west-2"), ACCOUNTS, REGIONS, 2, BROKEN)


def scan(accounts=ACCOUNTS, regions=REGIONS, session_factory=None, doctor=None, **kwargs):
    doctor = doctor or Doctor(settings=Settings())
    plan = build_plan(doctor.settings, regions=regions, accounts=accounts)
    extra = {"session_factory": session_factory} if session_factory else {}
    return scan_fleet(doctor, plan, **extra, **kwargs)


def faulty_scopes(faults, scopes):
    """A session factory that attaches ``faults`` only to the sessions of the given scopes."""

    def factory(scope, options, credentials):
        aws = new_aws(options, credentials)
        return faults.attach(aws) if scope in scopes else aws

    return factory


def by_key(report):
    return {(c.account, c.region, c.cluster): c for c in report.clusters}


def test_every_account_and_region_is_checked_through_its_role(fleet):
    report = scan()
    clusters = by_key(report)
    assert set(clusters) == set(fleet.clusters)
    for key, fault in fleet.clusters.items():
        assert clusters[key].status.value == fleet.expected_status(fault), key
        assert clusters[key].kinds == [TAGGED] and clusters[key].instances == 2
    critical = clusters[(ACCOUNTS[0], "us-west-2", "c1")].report
    assert [f.check for f in critical.findings] == ["efa-sg-self-reference", "efa-peer-unreachable"]
    assert report.status == Status.CRITICAL and report.exit_code == 2
    assert [s.status for s in report.scopes] == [Status.OK] * 6 and report.accounts == 3


# What a scope's clusters share (regional EarlyLoads, fmdoctor.engine.prefetch): made on the scope's session, once
# per account and region and subject, so they count on the fleet, not on one cluster's report.
REGIONAL = ("ec2.DescribeInstanceStatus", "ec2.DescribePlacementGroups", "fsx.DescribeFileSystems",
            "logs.DescribeLogGroups", "sagemaker.DescribeCluster")


def test_api_calls_are_the_lower_bound(fleet):
    report = scan()
    scopes = len(ACCOUNTS) * len(REGIONS)
    per_cluster: Counter[str] = Counter()
    for cluster in report.clusters:
        per_cluster.update(cluster.report.stats.api_calls)
    # Besides what each cluster's own `fmdoctor check` makes, the fleet adds one identity check, one
    # AssumeRole per account and one listing per source per account/region: nothing per cluster or instance.
    overhead = Counter(report.stats.api_calls)
    overhead.subtract(per_cluster)
    assert {k: v for k, v in overhead.items() if v and k not in REGIONAL} == {
        "sts.GetCallerIdentity": 1, "sts.AssumeRole": len(ACCOUNTS), "ec2.DescribeInstances": scopes,
        "sagemaker.ListClusters": scopes}
    # The answers that are the same for every cluster of an account and region are asked once there.
    assert [overhead[op] for op in REGIONAL[:3]] == [scopes] * 3
    # And each cluster's check costs what a standalone check of it costs, less what its scope shares.
    account, region = ACCOUNTS[0], "us-west-2"
    source = new_aws(AwsOptions(region=region))
    credentials = assume_role(source, f"arn:aws:iam::{account}:role/fmdoctor-read-only")
    standalone = Doctor(settings=Settings(), connection=Connection(region=region),
                        aws_factory=lambda options: new_aws(options, credentials)).check("c0")
    own = {k: v for k, v in standalone.stats.api_calls.items() if k not in REGIONAL}
    assert by_key(report)[(account, region, "c0")].report.stats.api_calls == own


def test_denied_role_is_reported_for_its_account_and_the_rest_goes_on(fleet, faults):
    denied = ACCOUNTS[1]
    faults.deny("sts", "AssumeRole", when=lambda params: f"::{denied}:" in params["RoleArn"])
    report = scan(session_factory=faulty_scopes(faults, {Scope(None, "us-west-2")}))
    failed = report.failed_scopes()
    assert {(s.account, s.region) for s in failed} == {(denied, r) for r in REGIONS}
    error = failed[0].error
    assert (error.check, error.code, error.iam_action) == ("assume-role", "AccessDenied", "sts:AssumeRole")
    assert f"arn:aws:iam::{denied}:role/fmdoctor-read-only" in error.unverified
    assert {c.account for c in report.clusters} == {ACCOUNTS[0], ACCOUNTS[2]}
    assert len(report.clusters) == 8
    # A critical cluster and an account that could not be scanned: unknown ranks worst, as in `fmdoctor check`.
    assert report.status == Status.UNKNOWN and report.exit_code == 3


def test_region_not_enabled_is_reported_for_that_scope(fleet, faults):
    scope = Scope(ACCOUNTS[2], "eu-west-1")
    faults.fail("ec2", "DescribeInstances", "OptInRequired", "You are not subscribed to this service.", 401)
    report = scan(session_factory=faulty_scopes(faults, {scope}))
    [failed] = report.failed_scopes()
    assert (failed.account, failed.region) == (scope.account, scope.region)
    assert failed.error.code == "OptInRequired" and "region enabled" in failed.error.message
    assert failed.error.iam_action == "ec2:DescribeInstances"
    assert len(report.clusters) == 10 and (scope.account, scope.region, "c0") not in by_key(report)


def test_unknown_region_name_is_a_usage_error():
    with pytest.raises(UsageError, match="not an AWS region"):
        build_plan(Settings(), regions=["us-west-2", "mars-north-1x"])


def test_throttled_scope_is_retried_then_reported(fleet, faults, retry_sleeps):
    scope = Scope(ACCOUNTS[0], "eu-west-1")
    faults.throttle("ec2", "DescribeInstances")
    report = scan(session_factory=faulty_scopes(faults, {scope}))
    [failed] = report.failed_scopes()
    assert (failed.account, failed.region, failed.error.code) == (scope.account, scope.region, "Throttling")
    assert faults.injected["ec2.DescribeInstances"] == 5  # standard retry mode: 5 attempts, then give up
    assert len(retry_sleeps) == 4
    assert len(report.clusters) == 10


def test_throttling_inside_one_cluster_check_is_that_clusters_error(fleet, faults, retry_sleeps):
    faults.throttle("ec2", "DescribeSecurityGroupRules")
    report = scan(session_factory=faulty_scopes(faults, {Scope(ACCOUNTS[2], "us-west-2")}))
    clusters = by_key(report)
    throttled = [clusters[(ACCOUNTS[2], "us-west-2", n)] for n in ("c0", "c1")]
    # The cluster was found; only the checks that read its group rules could not run (named, never 'ok').
    for cluster in throttled:
        assert cluster.status == Status.WARNING and cluster.report.errors, cluster.cluster
        assert {(e.code, e.iam_action) for e in cluster.report.errors} == {
            ("Throttling", "ec2:DescribeSecurityGroupRules")}
        assert "efa-subnet-spread" in cluster.report.stats.checks_run
        assert "efa-sg-self-reference" not in cluster.report.stats.checks_run
    assert clusters[(ACCOUNTS[2], "eu-west-1", "c0")].status == Status.OK
    assert report.failed_scopes() == []


def test_sharding_splits_accounts_without_overlap(fleet):
    seen = []
    for index in range(2):
        doctor = Doctor(settings=Settings())
        plan = build_plan(doctor.settings, regions=["us-west-2"], accounts=ACCOUNTS, shard=(index, 2))
        seen.append({c.account for c in scan_fleet(doctor, plan).clusters})
    assert seen[0] | seen[1] == set(ACCOUNTS) and not seen[0] & seen[1]




def test_every_session_of_a_scan_reads_as_the_settings_say(fleet):
    """aws.read_timeout is 90s: the scope sessions (discovery, and the regional loads its clusters share:
    placement groups, file systems, scheduled events) wait as long as each cluster's own run does, not
    botocore's 30 s default, which would fail a slow answer the run itself would have waited for."""
    opened: list[tuple[Scope, AwsOptions]] = []

    def recording(scope, options, credentials):
        opened.append((scope, options))
        return new_aws(options, credentials)

    doctor = Doctor(settings=Settings.model_validate({"aws": {"read_timeout": "90s"}}))
    report = scan(accounts=ACCOUNTS[:1], regions=REGIONS[:1], session_factory=recording, doctor=doctor)
    assert report.clusters and report.stats.api_calls["ec2.DescribePlacementGroups"] == 1  # shared by the scope
    assert {options.read_timeout for _, options in opened} == {90.0}
