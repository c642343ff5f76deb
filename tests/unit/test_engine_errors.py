"""AccessDenied, throttling and bugs inside checks become error entries; the other checks still report."""

from __future__ import annotations

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.engine.model import Status


def other_errors(report):
    """The report's errors less training-stalled's NoLogGroup: healthy_efa_cluster ships no job logs and
    configures no checkpoints, so that check says it could not see the job (its design: test_training_stalled)."""
    assert [(e.check, e.code) for e in report.errors if e.check == "training-stalled"] == [
        ("training-stalled", "NoLogGroup")]
    return [e for e in report.errors if e.check != "training-stalled"]


def test_denied_api_names_check_action_and_what_is_unverified(healthy_efa_cluster, run_with_faults, faults):
    faults.deny("ec2", "DescribePlacementGroups")
    report = run_with_faults()
    [error] = other_errors(report)
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


def test_denied_inventory_detail_fails_only_the_checks_that_read_it(healthy_efa_cluster, run_with_faults, faults):
    faults.deny("ec2", "DescribeSecurityGroups")
    only = ["efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached", "efa-missing-interfaces"]
    report = run_with_faults(only)
    # The group rules were not readable: the rule check says so, naming the action; the others still ran.
    [error] = report.errors
    assert (error.check, error.code, error.iam_action) == ("efa-sg-self-reference", "AccessDenied",
                                                          "ec2:DescribeSecurityGroups")
    assert error.message.startswith("could not read the cluster's security groups: ")
    assert report.stats.checks_run == ["efa-subnet-spread", "efa-not-attached", "efa-missing-interfaces"]
    assert report.findings == [] and report.status is Status.WARNING  # part unverified: never a clean 'ok'


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


@pytest.mark.parametrize("code", ["EC2ThrottledException", "BandwidthLimitExceeded", "SlowDown"])
def test_every_throttling_code_the_retry_mode_backs_off_is_said_as_throttling(
        healthy_efa_cluster, run_with_faults, faults, retry_sleeps, code):
    """An error the retry mode backed off and retried as throttling is "still throttled after retries" (and serve
    redrives its event), whichever of botocore's throttling codes the service used."""
    faults.throttle("ec2", "DescribePlacementGroups", code=code)
    report = run_with_faults(["placement-group"])
    [error] = report.errors
    assert faults.injected["ec2.DescribePlacementGroups"] == 5  # retried as throttling: 5 attempts in all
    assert error.code == code and "still throttled after retries" in error.message


def test_the_throttling_codes_are_the_retry_modes_own():
    from botocore.retries.standard import ThrottledRetryableChecker

    from fmdoctor.engine.errors import THROTTLING_CODES

    retried = set(ThrottledRetryableChecker._THROTTLED_ERROR_CODES)
    assert retried - THROTTLING_CODES == {"LimitExceededException", "TransactionInProgressException"}


def test_a_crashing_check_does_not_sink_the_run(healthy_efa_cluster, run_checks, monkeypatch):
    from fmdoctor.checks.efa_subnet_spread import EfaSubnetSpread

    def boom(self, ctx):
        raise KeyError("bug")

    monkeypatch.setattr(EfaSubnetSpread, "run", boom)
    report = run_checks()
    [error] = other_errors(report)
    assert (error.check, error.code) == ("efa-subnet-spread", "InternalError")
    assert "efa-sg-self-reference" in report.stats.checks_run


EFA_RUN_CALLS = {
    # efa-errors' CloudWatch snapshot: one listing per EFA counter (4); the checks selected read no GPU series
    # (Check.metrics), so none is listed; no series, no fetch.
    "cloudwatch.ListMetrics": 4,
    "ec2.DescribeInstanceTypes": 1,
    "ec2.DescribeInstances": 1,
    "ec2.DescribePlacementGroups": 1,
    "ec2.DescribeSecurityGroupRules": 1,
    "ec2.DescribeSecurityGroups": 1,
    "ec2.DescribeSubnets": 1,
}


def test_api_calls_are_counted_and_batched(healthy_efa_cluster, run_checks):
    report = run_checks()  # a full run: every inventory part is discovered
    calls = report.stats.api_calls
    # 4 instances, 97 interfaces: still one call per describe, never one per instance or interface. The
    # network topology is read once for every network check, its subnets the inventory's (asked VPC-wide
    # once); prefix-list entries only for S3's list; no FSx file system, so no interfaces beyond the inventory.
    assert calls == {
        **EFA_RUN_CALLS,
        # The GPU checks' snapshot too: one listing per EFA counter (4) and GPU metric name (5), and Container
        # Insights' utilization for the GPU nodes that publish none under the agent's names.
        "cloudwatch.ListMetrics": 10,
        "ec2.DescribeNetworkAcls": 1,
        "ec2.DescribeRouteTables": 1,
        "ec2.DescribeInternetGateways": 1,
        "ec2.DescribeNatGateways": 1,
        "ec2.DescribeVpcEndpoints": 1,
        "ec2.DescribeManagedPrefixLists": 1,
        "ec2.GetManagedPrefixListEntries": 2,  # S3's and S3 Express's lists, the two a gateway endpoint routes
        "ec2.DescribeInstanceStatus": 1,  # spot-interruption: the scheduled events of every instance at once
        # training-stalled looks for the job's log groups: ParallelCluster's, Container Insights', HyperPod's.
        "logs.DescribeLogGroups": 3,
        "fsx.DescribeFileSystems": 1,
        "sagemaker.DescribeCluster": 1,  # hyperpod-node-unhealthy: is there a HyperPod cluster of that name?
        # SageMaker endpoints tagged with the cluster: one tag query per configured tag key (none found).
        "resourcegroupstaggingapi.GetResources": 3,
    }


def test_only_efa_discovers_only_what_the_efa_checks_read(healthy_efa_cluster, run_with_faults, faults):
    """A training-only user without tag:GetResources or SageMaker access, asking for the EFA checks, gets no
    SageMaker or tagging call and no error for checks that were not asked for."""
    faults.deny("resourcegroupstaggingapi", "GetResources")
    faults.deny("sagemaker", "DescribeCluster")
    report = run_with_faults(["efa"])
    assert report.errors == [] and faults.injected == {}
    assert report.stats.api_calls == EFA_RUN_CALLS  # the full run's calls less the endpoint and HyperPod ones
    assert "efa-sg-self-reference" in report.stats.checks_run


def test_a_name_no_instance_carries_is_looked_up_as_what_the_selected_checks_read(aws, run_checks):
    aws.client("sagemaker").create_cluster(
        ClusterName="hp-train",
        InstanceGroups=[{"InstanceGroupName": "workers", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2,
                         "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/", "OnCreate": "on_create.sh"},
                         "ExecutionRole": "arn:aws:iam::123456789012:role/hp", "ThreadsPerCore": 1}],
        VpcConfig={"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
    )
    # The EFA configuration checks read EC2 instances only: a HyperPod cluster's name is unknown to them, and says why.
    with pytest.raises(TargetNotFound, match="no running or pending instances tagged with cluster") as caught:
        run_checks(["efa-sg-self-reference", "efa-subnet-spread"], cluster="hp-train")
    assert "cluster 'hp-train' in us-west-2" in caught.value.message
    assert "the selected checks read no SageMaker endpoints or SageMaker HyperPod clusters" in caught.value.hint
    # The EFA family holds efa-errors, which judges HyperPod's nodes too: the name is looked up as a HyperPod
    # cluster before it is unknown, alone or with the HyperPod check.
    only_efa = run_checks(["efa"], cluster="hp-train")
    assert [(e.check, e.code) for e in only_efa.errors] == [("efa-errors", "NoMetricSource")]
    report = run_checks(["efa", "hyperpod"], cluster="hp-train")
    assert report.stats.checks_run == ["hyperpod-node-unhealthy"]
    # Its p5 nodes have EFA, whose counters no source here can see: not verified, with what to configure.
    [error] = report.errors
    assert (error.check, error.code) == ("efa-errors", "NoMetricSource") and "metrics.url" in error.message
    assert report.status is Status.WARNING
    # metrics.source auto looks for the Slurm cluster's observability extension (moto answers: none).
    # DescribePlacementGroups: placement-group's load, started before the inventory said there are no EC2 nodes.
    # The EFA counters' listings begin before the inventory shows that no EC2 instance carries an EFA interface,
    # and stop then: at most one page each (fmdoctor.metrics.nodes.start_listings).
    calls = dict(report.stats.api_calls)
    assert calls.pop("cloudwatch.ListMetrics", 0) <= len(Settings().cluster("hp-train").gpu.efa_metrics)
    assert calls == {"ec2.DescribeInstances": 1, "ec2.DescribePlacementGroups": 1, "sagemaker.DescribeCluster": 1,
                     "sagemaker.ListClusterNodes": 1, "ec2.DescribeInstanceTypes": 1,
                     "sagemaker.ListClusterExtensions": 1}
