"""AccessDenied, throttling and bugs inside checks become error entries; the other checks still report."""

from __future__ import annotations

from fmdoctor.engine.model import Status


def test_denied_api_names_check_action_and_what_is_unverified(healthy_efa_cluster, run_with_faults, faults):
    faults.deny("ec2", "DescribePlacementGroups")
    report = run_with_faults()
    [error] = report.errors
    assert error.check == "placement-group"
    assert error.code == "AccessDenied"
    assert error.iam_action == "ec2:DescribePlacementGroups"
    assert "strategy of placement group pg" in error.unverified
    # every other check ran and reported
    assert {"efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached"} <= set(report.stats.checks_run)
    assert report.status is Status.WARNING


def test_denied_inventory_means_unknown(healthy_efa_cluster, run_with_faults, faults):
    faults.deny("ec2", "DescribeInstances")
    report = run_with_faults()
    assert report.status is Status.UNKNOWN and report.exit_code == 3
    [error] = report.errors
    assert (error.check, error.code, error.iam_action) == ("inventory", "AccessDenied", "ec2:DescribeInstances")
    assert report.findings == []


def test_throttling_is_retried_then_succeeds(healthy_efa_cluster, run_with_faults, faults):
    faults.throttle("ec2", "DescribeSubnets", times=2)
    report = run_with_faults(["efa-subnet-spread"])
    assert report.errors == []
    assert faults.injected["ec2.DescribeSubnets"] == 2
    assert report.status is Status.OK


def test_throttling_exhausted_is_reported(healthy_efa_cluster, run_with_faults, faults, retry_sleeps):
    faults.throttle("ec2", "DescribePlacementGroups", code="RequestLimitExceeded")
    report = run_with_faults(["placement-group"])
    [error] = report.errors
    assert error.code == "RequestLimitExceeded"
    assert "still throttled after retries" in error.message
    assert faults.injected["ec2.DescribePlacementGroups"] == 5  # standard mode, 5 attempts in all
    assert len(retry_sleeps) == 4 and all(0 <= s <= 20 for s in retry_sleeps)  # backed off between them


def test_a_crashing_check_does_not_sink_the_run(healthy_efa_cluster, run_checks, monkeypatch):
    from fmdoctor.checks.efa_subnet_spread import EfaSubnetSpread

    def boom(self, ctx):
        raise KeyError("bug")

    monkeypatch.setattr(EfaSubnetSpread, "run", boom)
    report = run_checks()
    [error] = report.errors
    assert (error.check, error.code) == ("efa-subnet-spread", "InternalError")
    assert "efa-sg-self-reference" in report.stats.checks_run


def test_api_calls_are_counted_and_batched(healthy_efa_cluster, run_checks):
    report = run_checks()
    calls = report.stats.api_calls
    # 4 instances, 97 interfaces: still one call per describe, never one per instance or interface. The
    # network topology (subnets again, VPC-wide) is read once for every network check; prefix-list entries
    # only for S3's list; no FSx file system, so no interfaces beyond the inventory.
    assert calls == {
        # efa-errors' CloudWatch snapshot: one listing per EFA counter and GPU metric name; no series, no fetch.
        "cloudwatch.ListMetrics": 7,
        "ec2.DescribeInstanceTypes": 1,
        "ec2.DescribeInstances": 1,
        "ec2.DescribePlacementGroups": 1,
        "ec2.DescribeSecurityGroupRules": 1,
        "ec2.DescribeSecurityGroups": 1,
        "ec2.DescribeSubnets": 2,
        "ec2.DescribeNetworkAcls": 1,
        "ec2.DescribeRouteTables": 1,
        "ec2.DescribeInternetGateways": 1,
        "ec2.DescribeNatGateways": 1,
        "ec2.DescribeVpcEndpoints": 1,
        "ec2.DescribeManagedPrefixLists": 1,
        "ec2.GetManagedPrefixListEntries": 1,
        "fsx.DescribeFileSystems": 1,
        "sagemaker.DescribeCluster": 1,  # hyperpod-node-unhealthy: is there a HyperPod cluster of that name?
        # SageMaker endpoints tagged with the cluster: one tag query per configured tag key (none found).
        "resourcegroupstaggingapi.GetResources": 3,
    }
