"""``fmdoctor check`` against SageMaker endpoints over HTTP: the installed CLI, moto's server on 127.0.0.1."""

from __future__ import annotations

import pytest

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo
from fmdoctor.demo.seed_inference import CHAT, seed_inference

pytestmark = pytest.mark.e2e

INFERENCE_CALLS = {
    "resourcegroupstaggingapi.GetResources": 3,  # one per configured tag key
    "sagemaker.ListEndpoints": 1,
    "sagemaker.DescribeEndpoint": 2,
    "sagemaker.DescribeEndpointConfig": 2,
    "cloudwatch.GetMetricData": 1,  # every metric of every inference check
    "application-autoscaling.DescribeScalableTargets": 1,
}


def test_demo_endpoint_over_its_slo_at_max_capacity(moto_server, fmdoctor_cli):
    seed_demo(moto_server.session(), seeders=(seed_inference,))  # the demo's endpoints only: a cluster of endpoints
    result = fmdoctor_cli("check", "--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url",
                          moto_server.url, "--format", "json", "--only", "inference")
    assert result.code == 2, result.stderr
    report = result.json()
    by_check = {f["check"]: f for f in report["findings"]}
    assert set(by_check) == {"inference-latency-slo", "accelerator-saturation", "autoscaling-at-max"}
    resource = f"endpoint/{CHAT}/variant/AllTraffic"
    assert {f["resource"] for f in report["findings"]} == {resource}  # demo-embeddings stays healthy
    latency = by_check["inference-latency-slo"]
    assert latency["severity"] == "critical" and latency["evidence"]["model_latency_p90_ms"] == 1600.0
    assert by_check["accelerator-saturation"]["evidence"]["utilization_percent"] == 93.0
    assert by_check["autoscaling-at-max"]["evidence"]["max_capacity"] == 4
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
