"""Inference fleet nodes: GPU series discovered with ListMetrics (whatever dimensions the agent or Container
Insights publishes), and a latency_metric that no node publishes is NoData, never an idle fleet."""

from __future__ import annotations

import pytest

from fmdoctor.demo.endpoint_builder import EndpointBuilder, publish_node_metric, samples
from fmdoctor.demo.metrics import MetricsPublisher, launch_nodes
from fmdoctor.engine.model import Status

CLUSTER = "test-cluster"  # the builder's cluster tag
LOAD = ["accelerator-saturation", "inference-idle"]
A10G = ("NVIDIA A10G", 22888.0)
CONTAINER_INSIGHTS = {"namespace": "ContainerInsights", "utilization_metric": "node_gpu_utilization",
                      "memory_used_metric": "node_gpu_memory_used", "memory_total_metric": "node_gpu_memory_total",
                      "device_dimensions": ["GpuDevice"]}


@pytest.fixture
def serve(builder):
    """Launch inference fleet nodes (fmdoctor:role=inference), as their launch described them (ids, private IPs)."""
    builder.security_group("serve")

    def launch(*names: str, instance_type: str = "g5.12xlarge"):
        builder.launch(list(names), instance_type, "private-a", ["serve"], role="inference")
        return [builder.launched[name] for name in names]

    return launch


@pytest.fixture
def publish(aws, at):
    """What the agents publish in the 30 minutes before the run (six 5-minute periods; the window is 15m)."""
    return MetricsPublisher(aws.client("cloudwatch"), at)


def test_per_gpu_agent_series_are_discovered_not_guessed(serve, publish, infer):
    """The agent's default nvidia_gpu dimensions (index, name, host, appended InstanceId; no
    aggregation_dimensions) or host alone: read per GPU and averaged per node, the busiest GPU as the peak."""
    busy, calm, quiet = serve("busy", "calm", "quiet")
    publish.gpu_node(busy.id, busy.private_ip, 95.0, gpus=4, gpu=A10G, instance_type="g5.12xlarge")
    publish.gpu_node(calm.id, calm.private_ip, [92.0, 10.0, 10.0, 10.0], gpus=4, gpu=A10G,
                     instance_type="g5.12xlarge", append_instance_id=False)  # found by its hostname
    publish.gpu_node(quiet.id, quiet.private_ip, 0.5, gpus=4, gpu=A10G, instance_type="g5.12xlarge")
    publish.flush()

    report = infer(LOAD, cluster=CLUSTER)

    assert report.errors == []
    assert [(f.check, f.resource) for f in report.findings] == [("accelerator-saturation", busy.id),
                                                                ("inference-idle", quiet.id)]
    saturated = report.findings[0].evidence
    assert saturated["utilization_percent"] == pytest.approx(95, abs=2) and saturated["accelerators_per_instance"] == 4
    assert saturated["memory_utilization_percent"] == pytest.approx(80, abs=1)  # used / total, per GPU
    assert report.findings[1].evidence["max_utilization_percent"] <= 1.0
    calls = report.stats.api_calls
    # One listing per GPU metric name (utilization listed once for its Average and Maximum); the 3 nodes x
    # 4 GPUs x 4 statistics = 48 queries share one GetMetricData with nothing else to fetch.
    assert calls["cloudwatch.ListMetrics"] == 3 and calls["cloudwatch.GetMetricData"] == 1


def test_container_insights_fleet(serve, publish, infer):
    busy, calm = serve("busy", "calm")
    publish.container_insights_node(busy.id, busy.private_ip, 97.0, gpus=4, gpu=A10G, instance_type="g5.12xlarge")
    publish.container_insights_node(calm.id, calm.private_ip, 40.0, gpus=4, gpu=A10G, instance_type="g5.12xlarge")
    publish.flush()

    report = infer(LOAD, cluster=CLUSTER, gpu=CONTAINER_INSIGHTS)

    assert report.errors == []
    [finding] = report.findings
    assert (finding.check, finding.resource) == ("accelerator-saturation", busy.id)
    assert finding.evidence["utilization_percent"] == pytest.approx(97, abs=2)


def test_fleet_gpu_metrics_share_the_endpoints_get_metric_data(serve, publish, aws, infer, at):
    [node] = serve("gpu-serve")
    publish.gpu_node(node.id, node.private_ip, 60.0, gpus=4, gpu=A10G)
    publish.flush()
    endpoints = EndpointBuilder(aws, CLUSTER)
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.traffic("chat", at, invocations=100, gpu_utilization=40, gpu_memory_utilization=30)

    report = infer(["accelerator-saturation", "inference-idle", "inference-latency-slo"], cluster=CLUSTER)

    assert report.findings == [] and report.errors == [], report.errors
    assert report.stats.api_calls["cloudwatch.GetMetricData"] == 1  # variants and fleet in one sweep


def test_latency_metric_no_node_publishes_is_no_data_not_an_idle_fleet(serve, publish, infer):
    nodes = serve("serve-1", "serve-2", instance_type="g5.xlarge")
    for node in nodes:
        publish.gpu_node(node.id, node.private_ip, 0.5, gpus=1, gpu=A10G)  # quiet GPUs do not decide it either
    publish.flush()

    report = infer(["inference-idle", "inference-latency-slo"], cluster=CLUSTER,
                   inference={"latency_metric": "LLMServer/Typo"})

    assert report.findings == []
    errors = {e.check: e for e in report.errors}
    assert set(errors) == {"inference-idle", "inference-latency-slo"}
    assert all(e.code == "NoData" and "LLMServer/Typo" in e.message for e in errors.values())
    assert errors["inference-idle"].unverified == "whether the 2 accelerated inference nodes served requests"
    assert errors["inference-latency-slo"].unverified == "latency of 2 inference nodes"
    assert report.status is Status.WARNING


def test_latency_metric_published_by_some_nodes_makes_the_silent_one_idle(serve, infer, aws, at):
    busy, silent = serve("busy", "silent", instance_type="g5.xlarge")
    fast = samples(80.0, 150.0, fast=20.0)  # milliseconds, well within the SLO
    publish_node_metric(aws.client("cloudwatch"), "LLMServer", "RequestLatency", busy.id, at, fast)

    report = infer(["inference-idle", "inference-latency-slo"], cluster=CLUSTER,
                   inference={"latency_metric": "LLMServer/RequestLatency"})

    assert report.errors == []
    [idle] = report.findings
    assert (idle.check, idle.resource) == ("inference-idle", silent.id) and idle.evidence["requests"] == 0


def test_denied_list_metrics_leaves_the_fleet_load_unverified_and_the_endpoints_judged(serve, publish, aws, infer,
                                                                                        faults, at):
    [node] = serve("busy")
    publish.gpu_node(node.id, node.private_ip, 99.0, gpus=4, gpu=A10G)
    publish.flush()
    endpoints = EndpointBuilder(aws, CLUSTER)
    endpoints.endpoint("chat", "ml.g4dn.12xlarge")
    endpoints.traffic("chat", at, invocations=100, errors_5xx=20, gpu_utilization=380)
    faults.deny("cloudwatch", "ListMetrics")

    report = infer([*LOAD, "inference-errors"], cluster=CLUSTER, aws_factory=faults.aws_factory)

    # The endpoint's signals need no listing: still judged. The fleet's GPU load is not, and says why.
    assert {(f.check, f.resource) for f in report.findings} == {
        ("accelerator-saturation", "endpoint/chat/variant/AllTraffic"),
        ("inference-errors", "endpoint/chat/variant/AllTraffic")}
    errors = {e.check: e for e in report.errors}
    assert set(errors) == set(LOAD)
    assert {(e.code, e.iam_action) for e in report.errors} == {("AccessDenied", "cloudwatch:ListMetrics")}
    assert errors["accelerator-saturation"].unverified == "accelerator load of 1 inference node"
    assert errors["inference-idle"].unverified == "idleness of 1 accelerated inference node"
    assert faults.injected["cloudwatch.ListMetrics"] >= 1 and report.status is not Status.OK


def test_training_and_inference_nodes_of_one_target_list_each_metric_name_once(builder, serve, publish, infer):
    """The GPU checks (training nodes, 30m in 5m periods) and the inference checks (fleet nodes, one 15m
    period) fetch separately, but share one ListMetrics sweep per metric name, and neither judges the
    other's nodes."""
    training = launch_nodes(builder, 3)
    [fleet] = serve("serve-1")
    for node, utilization in zip(training, [95.0, 94.0, 2.0], strict=True):
        publish.gpu_node(node.id, node.private_ip, utilization)
    publish.gpu_node(fleet.id, fleet.private_ip, 99.0, gpus=4, gpu=A10G, instance_type="g5.12xlarge")
    publish.flush()

    report = infer(["gpu-idle", "gpu-metrics-missing", *LOAD], cluster=CLUSTER)

    assert report.errors == []
    assert [(f.check, f.resource) for f in report.findings] == [("gpu-idle", training[2].id),
                                                                ("accelerator-saturation", fleet.id)]
    assert report.findings[0].evidence["devices_reporting"] == 8  # not the fleet node's 4 GPUs besides
    calls = report.stats.api_calls
    # The GPU checks' 5 names (utilization, memory used/total, power, SM clock) include the fleet's 3.
    assert calls["cloudwatch.ListMetrics"] == 5 and calls["cloudwatch.GetMetricData"] == 2


def test_fleet_node_publishing_no_gpu_series_is_no_data(serve, publish, infer):
    busy, dark = serve("busy", "dark")
    publish.gpu_node(busy.id, busy.private_ip, 50.0, gpus=4, gpu=A10G)
    publish.gpu_node("i-0000000000000abcd", "10.9.9.9", 99.0, gpus=4)  # another target's node: not ours
    publish.flush()

    report = infer(["accelerator-saturation"], cluster=CLUSTER)

    assert report.findings == []
    [error] = report.errors
    assert error.code == "NoData" and dark.id in error.unverified and busy.id not in error.unverified
    assert "no gpu.utilization_metric series names it" in error.message
