"""Endpoint discovery: by cluster tag (any configured key), by name, endpoint-only targets, call counts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fmdoctor.demo.endpoint_builder import EndpointBuilder, samples
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.engine.inventory import COMPUTE, INFERENCE
from fmdoctor.engine.model import Status
from fmdoctor.engine.registry import default_registry
from fmdoctor.inference.metrics import MetricQuery, fetch_metrics, window_ending

REGION = "us-west-2"
CLUSTER = "serving"  # the cluster the endpoints fixture tags
INFERENCE_IDS = [c.id for c in default_registry().select(["inference"])]



def test_endpoint_only_cluster_is_a_target_not_an_unknown_cluster(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.endpoint("embed", "ml.g4dn.xlarge")
    EndpointBuilder(endpoints.session, "other-cluster").endpoint("not-ours", "ml.g4dn.xlarge")
    endpoints.traffic("chat", at, model_latency_us=samples(30_000, 60_000), invocations=50, gpu_utilization=30)
    endpoints.traffic("embed", at, model_latency_us=samples(30_000, 60_000), invocations=50, gpu_utilization=30)
    report = infer(INFERENCE_IDS)
    assert report.status is Status.OK, report.errors
    assert report.stats.checks_run == INFERENCE_IDS and report.findings == []
    calls = report.stats.api_calls
    # One tag query per configured tag key, one listing, one describe per endpoint, config and model, one
    # GetMetricData for every metric of every check, one DescribeScalableTargets, one DescribeInstanceTypes.
    # No DescribeCluster: no inference check reads a HyperPod cluster, so none is looked up; no
    # ListInferenceComponents: both endpoints serve one model each (their variants name it).
    assert calls == {
        "resourcegroupstaggingapi.GetResources": 3,
        "sagemaker.ListEndpoints": 1,
        "sagemaker.DescribeEndpoint": 2,
        "sagemaker.DescribeEndpointConfig": 2,
        "sagemaker.DescribeModel": 2,
        "ec2.DescribeInstances": 1,
        "cloudwatch.GetMetricData": 1,
        "application-autoscaling.DescribeScalableTargets": 1,
        "ec2.DescribeInstanceTypes": 1,
    }


def test_any_configured_tag_key_selects_endpoints(aws, infer):
    EndpointBuilder(aws, CLUSTER, tag_key="eks:cluster-name").endpoint("eks-served", "ml.g4dn.xlarge")
    EndpointBuilder(aws, CLUSTER, tag_key="team").endpoint("unrelated-key", "ml.g4dn.xlarge")
    report = infer(["endpoint-unhealthy"])
    doctor = Doctor(connection=Connection(region=REGION))
    assert [e.name for e in doctor.inventory(CLUSTER).endpoints] == ["eks-served"]
    assert report.status is Status.OK


def test_endpoint_flag_alone_checks_just_those_endpoints(aws, endpoints, endpoint_state, infer):
    untagged = EndpointBuilder(aws, None)
    untagged.endpoint("broken", "ml.g4dn.xlarge")
    untagged.endpoint("fine", "ml.g4dn.xlarge")
    untagged.endpoint("not-selected", "ml.g4dn.xlarge")
    endpoint_state("broken", "Failed", "CannotStartContainerError")
    endpoint_state("not-selected", "Failed", "also broken, but not asked about")
    report = infer(["endpoint-unhealthy"], cluster=None, overrides={"inference": {"endpoints": ["broken", "fine"]}})
    assert report.cluster == "endpoint/broken,fine"
    assert [f.resource for f in report.findings] == ["endpoint/broken"]
    assert report.stats.api_calls["sagemaker.DescribeEndpoint"] == 2


def test_named_endpoint_that_does_not_exist_is_target_not_found(aws, infer):
    with pytest.raises(TargetNotFound, match="SageMaker endpoint 'typo' does not exist"):
        infer(cluster=None, overrides={"inference": {"endpoints": ["typo"]}})


def test_unknown_cluster_is_still_unknown(aws, infer):
    with pytest.raises(TargetNotFound, match="no running or pending instances tagged with cluster 'nope'"):
        infer(cluster="nope")


def test_denied_tag_discovery_is_unverified_for_inference_checks_only(healthy_efa_cluster, infer, faults):
    faults.deny("resourcegroupstaggingapi", "GetResources")
    report = infer(["efa", "inference"], cluster="test-cluster", aws_factory=faults.aws_factory)
    denied = [e for e in report.errors if e.code == "AccessDenied"]
    assert {e.check for e in denied} == set(INFERENCE_IDS)
    assert {e.iam_action for e in denied} == {"tag:GetResources"}
    assert "SageMaker endpoints tagged fmdoctor:cluster=test-cluster" in denied[0].unverified
    # The only other entry is efa-errors' own: this cluster publishes no EFA counters (not verified, never OK).
    assert {(e.check, e.code) for e in report.errors if e not in denied} == {("efa-errors", "NoMetrics")}
    assert "efa-sg-self-reference" in report.stats.checks_run
    assert report.status is Status.WARNING


def test_denied_tag_discovery_without_instances_is_unknown(aws, infer, faults):
    faults.deny("resourcegroupstaggingapi", "GetResources")
    report = infer(aws_factory=faults.aws_factory)
    assert report.status is Status.UNKNOWN
    [error] = report.errors
    assert (error.check, error.code, error.iam_action) == ("inventory", "AccessDenied", "tag:GetResources")


def test_inference_role_nodes_are_not_training_compute(builder, infer):
    builder.security_group("sg")
    builder.launch(["train-1"], "p4d.24xlarge", "private-a", ["sg"])
    builder.launch(["serve-1"], "g5.xlarge", "private-a", ["sg"], role="inference")
    inventory = Doctor(connection=Connection(region=REGION)).inventory("test-cluster")
    assert {i.name: i.role for i in inventory.instances} == {"train-1": COMPUTE, "serve-1": INFERENCE}
    assert [i.name for i in inventory.accelerated_nodes()] == ["train-1"]


def test_get_metric_data_is_batched_500_queries_a_call(aws, at):
    doctor = Doctor(connection=Connection(region=REGION))
    session = doctor.connect(doctor.cluster_settings("x"))
    queries = [MetricQuery((str(i), "v"), "AWS/SageMaker", "Invocations", (("EndpointName", f"e{i}"),), "Sum")
               for i in range(1001)]
    aws.client("cloudwatch").put_metric_data(Namespace="AWS/SageMaker", MetricData=[
        {"MetricName": "Invocations", "Dimensions": [{"Name": "EndpointName", "Value": "e1000"}], "Value": 7.0,
         "Timestamp": at - timedelta(minutes=2)}])
    values = fetch_metrics(session.client("cloudwatch"), queries, window_ending(at, timedelta(minutes=15)))
    assert values == {("1000", "v"): 7.0}  # the last query, in the third call; no data is no entry, not zero
    assert session.calls.snapshot() == {"cloudwatch.GetMetricData": 3}

def test_lowercased_arns_and_lagging_tag_index():
    """Real AWS, not moto: SageMaker may lower-case names in ARNs and the tagging index lags deletions.

    botocore's Stubber answers with the real response shapes; ListEndpoints gives the exact name to
    describe (CloudWatch dimensions need it) and drops the tagged endpoint that no longer exists.
    """
    import boto3
    from botocore.stub import Stubber

    from fmdoctor.engine.aws import Aws
    from fmdoctor.engine.endpoints import fetch_endpoints

    aws = Aws(boto3.Session(region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"))
    arn = f"arn:aws:sagemaker:{REGION}:123456789012:endpoint/"
    tagging, sagemaker = Stubber(aws.client("resourcegroupstaggingapi")), Stubber(aws.client("sagemaker"))
    tagged = {"ResourceTagMappingList": [{"ResourceARN": arn + "llmchat", "Tags": []},
                                         {"ResourceARN": arn + "deleted-yesterday", "Tags": []}]}
    tagging.add_response("get_resources", tagged)  # one tag key configured below
    sagemaker.add_response("list_endpoints", {"Endpoints": [{
        "EndpointName": "LLMChat", "EndpointArn": arn + "llmchat", "CreationTime": "2026-01-01T00:00:00Z",
        "LastModifiedTime": "2026-01-01T00:00:00Z", "EndpointStatus": "InService"}]})
    sagemaker.add_response("describe_endpoint", {
        "EndpointName": "LLMChat", "EndpointArn": arn + "llmchat", "EndpointConfigName": "llmchat-v3",
        "EndpointStatus": "InService", "CreationTime": "2026-01-01T00:00:00Z",
        "LastModifiedTime": "2026-01-01T00:00:00Z",
        "ProductionVariants": [{"VariantName": "AllTraffic", "CurrentInstanceCount": 2, "DesiredInstanceCount": 2}],
    }, {"EndpointName": "LLMChat"})
    sagemaker.add_response("describe_endpoint_config", {
        "EndpointConfigName": "llmchat-v3", "EndpointConfigArn": arn + "config", "CreationTime": "2026-01-01T00:00:00Z",
        "ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.g5.12xlarge"}],
    }, {"EndpointConfigName": "llmchat-v3"})
    with tagging, sagemaker:
        endpoints, gaps = fetch_endpoints(aws, "serving", ["fmdoctor:cluster"])
    assert gaps == ()
    [endpoint] = endpoints
    assert (endpoint.name, endpoint.config_name, endpoint.selected_by) == ("LLMChat", "llmchat-v3", "tag")
    assert endpoint.variants[0].instance_type == "ml.g5.12xlarge" and endpoint.variants[0].current_instances == 2
    tagging.assert_no_pending_responses()
    sagemaker.assert_no_pending_responses()


def test_endpoint_kinds_and_images_are_read_from_the_config_and_models(endpoints, aws):
    """AsyncInferenceConfig and ServerlessConfig come from DescribeEndpointConfig, the image from DescribeModel;
    an endpoint whose variants name their model hosts no inference components (none are listed)."""
    from fmdoctor.demo.endpoint_builder import VLLM_IMAGE

    endpoints.endpoint("jobs", "ml.g4dn.xlarge", async_output="s3://b/out/", async_max_concurrency=4)
    endpoints.serverless("sls", max_concurrency=7)
    endpoints.endpoint("chat", "ml.g4dn.12xlarge", image=VLLM_IMAGE)
    doctor = Doctor(connection=Connection(region=REGION))
    by_name = {e.name: e for e in doctor.inventory(CLUSTER).endpoints}
    jobs, sls, chat = by_name["jobs"], by_name["sls"], by_name["chat"]
    assert (jobs.asynchronous, jobs.async_max_concurrency, jobs.hosts_components) == (True, 4, False)
    assert (sls.variants[0].serverless, sls.variants[0].serverless_max_concurrency) == (True, 7)
    assert not chat.asynchronous and chat.variants[0].image == VLLM_IMAGE and chat.components == ()
