"""Both sides held to AWS's documented metric sets (tests/fixtures/inference/sagemaker_metrics.json):
what fmdoctor asks CloudWatch for each kind of endpoint, and what the scenario builder publishes for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fmdoctor.demo.endpoint_builder import EndpointBuilder, samples
from fmdoctor.engine.api import new_aws
from fmdoctor.engine.endpoint_details import InferenceComponent
from fmdoctor.engine.endpoints import Endpoint, EndpointVariant
from fmdoctor.engine.registry import default_registry
from fmdoctor.inference import kinds

DOCUMENTED = json.loads((Path(__file__).parents[2] / "fixtures" / "inference" / "sagemaker_metrics.json").read_text())
INFERENCE_IDS = [c.id for c in default_registry().select(["inference"])]


def documented(kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m["namespace"], m["metric"]): m for m in DOCUMENTED[kind]}


def assert_documented(kind: str, namespace: str, metric: str, dimensions: list[str], unit: str | None = None) -> None:
    entry = documented(kind).get((namespace, metric))
    assert entry is not None, f"{namespace} {metric} is not published for {kind} endpoints"
    assert sorted(dimensions) == sorted(entry["dimensions"]), (kind, metric, dimensions)
    if unit is not None and entry["unit"] is not None:
        assert unit == entry["unit"], (kind, metric, unit)


@pytest.fixture
def published(monkeypatch) -> list[tuple[str, dict[str, Any]]]:
    sent: list[tuple[str, dict[str, Any]]] = []
    original = EndpointBuilder._put

    def record(self: EndpointBuilder, namespace: str, data: list[dict[str, Any]], batch: int = 500) -> None:
        sent.extend((namespace, d) for d in data)
        original(self, namespace, data, batch)

    monkeypatch.setattr(EndpointBuilder, "_put", record)
    return sent


def seed_each_kind(endpoints: EndpointBuilder, at) -> dict[str, str]:
    endpoints.endpoint("rt", "ml.g4dn.xlarge")
    endpoints.traffic("rt", at, model_latency_us=samples(50_000, 90_000), overhead_latency_us={4_000: 100},
                      invocations=10, errors_5xx=1, model_errors=1, gpu_utilization=50, gpu_memory_utilization=60)
    endpoints.endpoint("queue", "ml.g4dn.xlarge", async_output="s3://b/out/")
    endpoints.async_traffic("queue", at, backlog=[1] * 10, oldest_age_s=[5] * 10, processed=10, failures=1,
                            model_latency_us={2_000_000: 10}, time_in_backlog_us={1_000_000: 10},
                            gpu_utilization=50, gpu_memory_utilization=60)
    endpoints.serverless("sls")
    endpoints.serverless_traffic("sls", at, invocations=10, model_latency_us=samples(50_000, 90_000),
                                 overhead_latency_us={4_000: 100}, model_setup_us={2_000_000: 1},
                                 concurrency_utilization=0.2)
    endpoints.component_traffic("ic", at, invocations=10, model_latency_us={50_000: 10},
                                gpu_utilization_normalized=40, gpu_memory_utilization_normalized=90)
    return {"rt": "real-time", "queue": "async", "sls": "serverless", "ic": "inference-components"}


def test_published_datapoints_are_shaped_as_documented(endpoints, at, published):
    kind_of = seed_each_kind(endpoints, at)
    assert published
    for namespace, datum in published:
        dims = {d["Name"]: d["Value"] for d in datum["Dimensions"]}
        kind = kind_of[dims.get("EndpointName") or dims["InferenceComponentName"]]
        assert_documented(kind, namespace, datum["MetricName"], list(dims), datum["Unit"])


def test_queries_sent_for_each_kind_are_documented(endpoints, infer, at):
    kind_of = seed_each_kind(endpoints, at)
    sent: list[dict[str, Any]] = []

    def factory(options: Any, credentials: Any = None) -> Any:
        aws = new_aws(options, credentials)
        aws.session.events.register("provide-client-params.cloudwatch.GetMetricData",
                                    lambda params, **_: sent.extend(params["MetricDataQueries"]))
        return aws

    report = infer(INFERENCE_IDS, aws_factory=factory)
    assert report.errors == [], report.errors
    metrics = [q["MetricStat"]["Metric"] for q in sent]
    seen_kinds = set()
    for metric in metrics:
        dims = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
        kind = kind_of[dims["EndpointName"]]
        seen_kinds.add(kind)
        assert_documented(kind, metric["Namespace"], metric["MetricName"], list(dims))
    assert seen_kinds == {"real-time", "async", "serverless"}
    endpoint_only = [{"Name": "EndpointName", "Value": "queue"}]
    queue_metrics = {m["MetricName"] for m in metrics if m["Dimensions"] == endpoint_only}
    assert queue_metrics == {"ApproximateBacklogSize", "ApproximateAgeOfOldestRequest"}


def test_component_queries_are_documented():
    """Inference components cannot be created in moto: the queries are built for a described component."""
    component = InferenceComponent("ic", "hub", "AllTraffic", "InService", current_copies=1, desired_copies=1,
                                   accelerators_per_copy=1)
    endpoint = Endpoint("hub", "arn", "InService", variants=(EndpointVariant("AllTraffic", "ml.g5.12xlarge", 1, 1),),
                        hosts_components=True, components=(component,))
    queries = list(kinds.component_queries(endpoint))
    assert queries and not list(kinds.variant_queries(endpoint, endpoint.variants[0]))
    for q in queries:
        assert_documented("inference-components", q.namespace, q.metric, [k for k, _ in q.dimensions])
