"""hyperpod-node-unhealthy and HyperPod discovery: moto 5.2's SageMaker cluster APIs, and botocore's Stubber
for what moto cannot show (NodeRecovery, paging by SageMaker's own tokens, statuses moto never sets)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from botocore.stub import Stubber

from fmdoctor.config import Settings
from fmdoctor.demo.moto_health import set_hyperpod_node_status
from fmdoctor.engine import hyperpod
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.engine.model import Severity, Status

from ..conftest import CLUSTER, REGION

CHECK = ["hyperpod-node-unhealthy"]
LIFECYCLE = {"SourceS3Uri": "s3://sagemaker-lifecycle/slurm/", "OnCreate": "on_create.sh"}


def create_hyperpod(aws, name="hp-train", workers=3):
    aws.client("sagemaker").create_cluster(
        ClusterName=name,
        InstanceGroups=[{"InstanceGroupName": "workers", "InstanceType": "ml.p5.48xlarge", "InstanceCount": workers,
                         "LifeCycleConfig": LIFECYCLE, "ExecutionRole": "arn:aws:iam::123456789012:role/hp",
                         "ThreadsPerCore": 1}],
        VpcConfig={"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
    )
    return name


def node_ids(aws, name):
    """The nodes' ids as ListClusterNodes returns them: EC2 instance ids (moto_health makes moto's realistic)."""
    summaries = aws.client("sagemaker").list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
    ids = [n["InstanceId"] for n in summaries]
    assert all(re.fullmatch(r"i-[0-9a-f]{17}", i) for i in ids), ids
    return ids


def test_hyperpod_only_cluster_is_found_and_its_failed_node_reported(aws, run_checks):
    name = create_hyperpod(aws)
    failed = node_ids(aws, name)[1]
    set_hyperpod_node_status(aws, REGION, name, failed, "Failure", "Node failed deep health check")
    report = run_checks(CHECK, cluster=name)
    [finding] = report.findings
    assert (finding.resource, finding.severity) == (failed, Severity.CRITICAL)
    assert finding.evidence["instance_group"] == "workers" and finding.evidence["status"] == "Failure"
    assert finding.evidence["fix"] == [{"action": "replace-hyperpod-node", "cluster_name": name,
                                        "node_id": failed}]
    assert finding.evidence["nodes_by_status"] == {"Failure": 1, "Running": 2}
    assert "Node failed deep health check" in finding.summary
    # Discovery's DescribeCluster is reused by the check.
    assert report.stats.api_calls["sagemaker.DescribeCluster"] == 1
    assert report.stats.api_calls["sagemaker.ListClusterNodes"] == 1


def test_all_running_is_healthy_and_nodes_are_paged(aws, run_checks, monkeypatch):
    name = create_hyperpod(aws, workers=3)
    monkeypatch.setattr(hyperpod, "NODE_PAGE_SIZE", 2)
    report = run_checks(CHECK, cluster=name)
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    assert report.stats.api_calls["sagemaker.ListClusterNodes"] == 2


def test_unknown_name_is_still_an_unknown_cluster(aws, run_checks):
    with pytest.raises(TargetNotFound, match="no running or pending instances tagged with cluster 'nope'"):
        run_checks(CHECK, cluster="nope")


def test_ec2_cluster_without_hyperpod_is_skipped_and_a_configured_one_checked(builder, aws, run_checks):
    builder.launch(["login"], "m5.large", "public-a", [builder.security_group("sg")])
    report = run_checks(CHECK)
    assert [s.reason for s in report.skipped] == [f"no SageMaker HyperPod cluster named {CLUSTER!r} in {REGION}"]
    name = create_hyperpod(aws)
    set_hyperpod_node_status(aws, REGION, name, node_ids(aws, name)[0], "DeepHealthCheckInProgress", "")
    [finding] = run_checks(CHECK, hyperpod={"cluster_name": name}).findings
    assert finding.severity is Severity.WARNING and "fix" not in finding.evidence
    assert "running deep health checks" in finding.summary


def test_sagemaker_denied(builder, aws, run_with_faults, faults):
    builder.launch(["login"], "m5.large", "public-a", [builder.security_group("sg")])
    faults.deny("sagemaker", "DescribeCluster")
    probed = run_with_faults(CHECK)  # not configured: an EC2 cluster probably is not HyperPod at all
    assert probed.errors == [] and "sagemaker:DescribeCluster" in probed.skipped[0].reason
    configured = run_with_faults(CHECK, hyperpod={"cluster_name": "hp-train"})
    [error] = configured.errors
    assert (error.code, error.iam_action) == ("AccessDenied", "sagemaker:DescribeCluster")
    assert configured.status is Status.UNKNOWN  # the only check selected verified nothing


def _node(node_id, status, message="", group="workers"):
    return {"InstanceGroupName": group, "InstanceId": node_id, "InstanceType": "ml.p5.48xlarge",
            "LaunchTime": datetime(2025, 3, 1, tzinfo=UTC), "InstanceStatus": {"Status": status, "Message": message}}


def test_real_response_shapes_with_automatic_recovery(aws):
    """Stubber, with responses shaped like the real API: NodeRecovery and these statuses never come from moto."""

    def factory(options):
        aws_ = new_aws(options)
        stub = Stubber(aws_.client("sagemaker"))
        stub.add_response("describe_cluster", {
            "ClusterArn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh",
            "ClusterName": "hp-train", "ClusterStatus": "InService", "NodeRecovery": "Automatic",
            "Orchestrator": {"Eks": {"ClusterArn": "arn:aws:eks:us-west-2:123456789012:cluster/hp-eks"}},
            "InstanceGroups": [{"InstanceGroupName": "workers", "InstanceType": "ml.p5.48xlarge",
                                "CurrentCount": 3, "TargetCount": 4}]}, {"ClusterName": "hp-train"})
        stub.add_response("list_cluster_nodes", {"NextToken": "page-2", "ClusterNodeSummaries": [
            _node("i-0aaaaaaaaaaaaaaa1", "Running"), _node("i-0aaaaaaaaaaaaaaa2", "Failure", "GPU fell off the bus")]},
            {"ClusterName": "hp-train", "MaxResults": 100})
        stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [
            _node("i-0aaaaaaaaaaaaaaa3", "Pending"), _node("i-0aaaaaaaaaaaaaaa4", "SomethingNew")]},
            {"ClusterName": "hp-train", "MaxResults": 100, "NextToken": "page-2"})
        stub.activate()
        factory.stub = stub
        return aws_

    doctor = Doctor(settings=Settings(), connection=Connection(region=REGION), aws_factory=factory)
    report = doctor.check("hp-train", only=CHECK)
    factory.stub.assert_no_pending_responses()
    by_node = {f.resource: f for f in report.findings}
    assert set(by_node) == {"i-0aaaaaaaaaaaaaaa2", "i-0aaaaaaaaaaaaaaa3", "i-0aaaaaaaaaaaaaaa4"}
    failed = by_node["i-0aaaaaaaaaaaaaaa2"]
    assert failed.severity is Severity.CRITICAL and "fix" not in failed.evidence  # HyperPod replaces it itself
    assert "automatic node recovery should replace it" in failed.summary
    assert by_node["i-0aaaaaaaaaaaaaaa3"].severity is Severity.WARNING
    assert by_node["i-0aaaaaaaaaaaaaaa4"].evidence["status"] == "SomethingNew"  # unknown status: reported
