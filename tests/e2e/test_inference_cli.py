"""``fmdoctor check`` against SageMaker endpoints over HTTP: the installed CLI, moto's server on 127.0.0.1."""

from __future__ import annotations

import pytest

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo
from fmdoctor.demo.seed_inference import ASYNC_BATCH, CANARY, CHAT, RERANKER, SUMMARIZER, seed_inference

pytestmark = pytest.mark.e2e

INFERENCE_CALLS = {
    "resourcegroupstaggingapi.GetResources": 3,  # one per configured tag key
    "sagemaker.ListEndpoints": 1,
    "sagemaker.DescribeEndpoint": 7,  # SageMaker has no batched describe: one per endpoint, config and model
    "sagemaker.DescribeEndpointConfig": 7,
    "sagemaker.DescribeModel": 7,
    # Every metric of every inference check in one call, and the async endpoint's queue minute by minute.
    "cloudwatch.GetMetricData": 2,
    "application-autoscaling.DescribeScalableTargets": 1,
}


def variant(endpoint: str) -> str:
    return f"endpoint/{endpoint}/variant/AllTraffic"


def test_demo_endpoints_each_trip_their_own_check(moto_server, fmdoctor_cli):
    seed_demo(moto_server.session(), seeders=(seed_inference,))  # the demo's endpoints only: a cluster of endpoints
    result = fmdoctor_cli("check", "--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url",
                          moto_server.url, "--format", "json", "--only", "inference")
    assert result.code == 2, result.stderr
    report = result.json()
    by_check = {f["check"]: f for f in report["findings"] if f["resource"] != f"endpoint/{ASYNC_BATCH}"}
    # One finding per check, on the endpoint planted for it, and one for the async queue; demo-embeddings and
    # the vLLM endpoint (GPU memory 92 % full, as vLLM reserves it) stay healthy.
    assert sorted((f["check"], f["resource"]) for f in report["findings"]) == sorted([
        ("inference-latency-slo", variant(CHAT)),
        ("accelerator-saturation", variant(CHAT)),
        ("autoscaling-at-max", variant(CHAT)),
        ("endpoint-unhealthy", f"endpoint/{CANARY}"),
        ("inference-errors", variant(RERANKER)),
        ("inference-idle", variant(SUMMARIZER)),
        ("inference-latency-slo", f"endpoint/{ASYNC_BATCH}"),
    ])
    unhealthy = by_check["endpoint-unhealthy"]["evidence"]
    assert unhealthy["status"] == "Failed" and "ping health check" in unhealthy["failure_reason"]
    errors = by_check["inference-errors"]
    assert errors["evidence"]["error_rate_percent"] == 4.0 and errors["evidence"]["invocation_model_errors"] == 120
    assert by_check["inference-idle"]["severity"] == "warning"  # a GPU variant, not a CPU one
    latency = by_check["inference-latency-slo"]
    assert latency["severity"] == "critical" and latency["evidence"]["model_latency_p90_ms"] == 1600.0
    assert by_check["accelerator-saturation"]["evidence"]["utilization_percent"] == 93.0
    assert by_check["autoscaling-at-max"]["evidence"]["max_capacity"] == 4
    [queue] = [f for f in report["findings"] if f["resource"] == f"endpoint/{ASYNC_BATCH}"]
    assert queue["severity"] == "warning" and queue["evidence"]["breached"] == ["growing backlog"]
    assert queue["evidence"]["instances"] == 0 and "HasBacklogWithoutCapacity" in queue["summary"]
    assert report["errors"] == []
    calls = report["stats"]["api_calls"]
    assert {k: v for k, v in calls.items() if k in INFERENCE_CALLS} == INFERENCE_CALLS


def test_endpoint_flag_alone_checks_only_that_endpoint(moto_server, fmdoctor_cli):
    seed_demo(moto_server.session(), seeders=(seed_inference,))
    result = fmdoctor_cli("check", "--endpoint", "demo-embeddings", "--region", "us-west-2", "--endpoint-url",
                          moto_server.url, "--format", "json")
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["cluster"] == "endpoint/demo-embeddings" and report["status"] == "ok"
    assert "inference-latency-slo" in report["stats"]["checks_run"]
    assert {s["check"] for s in report["skipped"]} >= {"efa-sg-self-reference", "placement-group"}
    assert report["stats"]["api_calls"]["sagemaker.DescribeEndpoint"] == 1
