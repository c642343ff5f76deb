"""Asynchronous and serverless endpoints, judged by the metrics SageMaker publishes for them (moto).

Each endpoint gets exactly its kind's metric set, as tests/fixtures/inference/sagemaker_metrics.json lists
it from AWS's pages: an asynchronous endpoint publishes no Invocations and no OverheadLatency, its queue
metrics carry EndpointName alone; a serverless endpoint publishes ModelSetupTime and
ServerlessConcurrentExecutionsUtilization and no GPU metrics.
"""

from __future__ import annotations

import pytest

from fmdoctor.demo.endpoint_builder import samples
from fmdoctor.engine.model import Severity
from fmdoctor.engine.registry import default_registry

INFERENCE_IDS = [c.id for c in default_registry().select(["inference"])]
LATENCY, ERRORS, IDLE = ["inference-latency-slo"], ["inference-errors"], ["inference-idle"]
SATURATION, AT_MAX = ["accelerator-saturation"], ["autoscaling-at-max"]
OUTPUT = "s3://serving-async/out/"
STEADY = [3, 4, 2, 3, 4, 3, 2, 4, 3, 3]  # a queue that drains as fast as it fills
JOBS_20S = {18_000_000: 80, 22_000_000: 20}  # 20-second jobs, in microseconds


def async_endpoint(endpoints, name="batch-summaries", instances=2, max_concurrency=4):
    endpoints.endpoint(name, "ml.g4dn.xlarge", instances=instances, async_output=OUTPUT,
                       async_max_concurrency=max_concurrency)


def test_busy_healthy_async_endpoint_has_no_finding(endpoints, infer, at):
    """The audit's case: ~1,000 processed jobs, 2 failures, 20-second jobs, a steady short queue. Before, this
    read "100 % of invocations failed", "served no requests" and a latency breach of the 500 ms SLO."""
    async_endpoint(endpoints)
    endpoints.async_traffic("batch-summaries", at, backlog=STEADY, oldest_age_s=[25, 30, 20, 28, 31, 26, 22, 30, 27,
                            25], processed=100, failures=0.2, model_latency_us=JOBS_20S,
                            time_in_backlog_us={5_000_000: 90, 20_000_000: 10}, gpu_utilization=70,
                            gpu_memory_utilization=60)
    endpoints.autoscale("batch-summaries", min_capacity=0, max_capacity=2, backlog_per_instance=5)
    report = infer(INFERENCE_IDS)
    assert report.findings == [] and report.errors == []


def test_old_oldest_request_breaks_the_async_slo_and_not_the_real_time_one(endpoints, infer, at):
    async_endpoint(endpoints)
    ages = [60 * m for m in range(5, 15)]  # the oldest request has waited 14 minutes by the end
    endpoints.async_traffic("batch-summaries", at, backlog=[40] * 10, oldest_age_s=ages, processed=20,
                            model_latency_us=JOBS_20S, gpu_utilization=95)
    [finding] = infer(LATENCY).findings
    assert finding.resource == "endpoint/batch-summaries" and finding.severity is Severity.CRITICAL
    ev = finding.evidence
    assert ev["approximate_age_of_oldest_request_s"] == 840.0 and ev["async_max_age_s"] == 600.0
    assert ev["breached"] == ["oldest request"] and ev["endpoint_kind"] == "async"
    assert ev["model_latency_p90_ms"] == 22000.0  # reported, never held to the 500 ms real-time SLO
    assert "cannot keep up" in finding.summary
    assert infer(LATENCY, inference={"async_max_age": "20m"}).findings == []


def test_growing_backlog_is_a_warning_and_at_zero_instances_names_scale_from_zero(endpoints, infer, at):
    async_endpoint(endpoints, instances=1)
    endpoints.scale("batch-summaries", 0)  # scaled in to zero, and requests kept arriving
    endpoints.async_traffic("batch-summaries", at, backlog=[0, 1, 3, 6, 9, 12, 15, 19, 22, 26],
                            oldest_age_s=[0, 50, 110, 170, 230, 290, 350, 410, 470, 530])
    [finding] = infer(LATENCY).findings
    assert finding.severity is Severity.WARNING and finding.evidence["breached"] == ["growing backlog"]
    assert finding.evidence["instances"] == 0
    assert "HasBacklogWithoutCapacity" in finding.summary


def test_async_scaled_to_zero_with_an_empty_queue_is_healthy_not_idle(endpoints, infer, at):
    async_endpoint(endpoints, instances=1)
    endpoints.scale("batch-summaries", 0)
    endpoints.async_traffic("batch-summaries", at, backlog=[0] * 10, oldest_age_s=[0] * 10)
    report = infer(INFERENCE_IDS)
    assert report.findings == [] and report.errors == []


def test_async_instances_with_nothing_to_do_are_idle(endpoints, infer, at):
    async_endpoint(endpoints, instances=2)
    endpoints.async_traffic("batch-summaries", at, backlog=[0] * 10, oldest_age_s=[0] * 10, gpu_utilization=0)
    [finding] = infer(IDLE).findings
    assert finding.severity is Severity.WARNING and finding.evidence["requests_metric"] == "InvocationsProcessed"
    assert "scale to zero" in finding.summary


def test_async_queue_unpublished_is_not_verified(endpoints, infer):
    async_endpoint(endpoints)
    report = infer(LATENCY)
    assert report.findings == []
    assert [(e.unverified, e.code) for e in report.errors] == [("queue of asynchronous endpoint batch-summaries",
                                                                 "NoData")]


def test_async_error_rate_is_failures_over_processed(endpoints, infer, at):
    async_endpoint(endpoints)
    endpoints.async_traffic("batch-summaries", at, backlog=STEADY, oldest_age_s=[30] * 10, processed=100, failures=4)
    [finding] = infer(ERRORS).findings
    ev = finding.evidence
    assert (ev["error_rate_percent"], ev["invocations_processed"], ev["invocation_failures"]) == (4.0, 1000, 40)
    assert ev["requests_metric"] == "InvocationsProcessed" and "InvocationsProcessed" in finding.summary


def test_async_failures_without_a_denominator_are_not_verified_never_100_percent(endpoints, infer, at):
    async_endpoint(endpoints)
    endpoints.async_traffic("batch-summaries", at, backlog=STEADY, oldest_age_s=[30] * 10, processed=0, failures=2)
    report = infer(ERRORS)
    assert report.findings == []
    [error] = report.errors
    assert (error.unverified, error.code) == ("error rate of batch-summaries/AllTraffic", "NoData")
    assert "no InvocationsProcessed datapoints" in error.message


def test_async_at_max_with_an_old_queue_is_the_scaling_limit(endpoints, infer, at):
    async_endpoint(endpoints, instances=2)
    endpoints.autoscale("batch-summaries", min_capacity=0, max_capacity=2, backlog_per_instance=5)
    endpoints.async_traffic("batch-summaries", at, backlog=[80] * 10, oldest_age_s=[900] * 10, processed=20)
    [finding] = infer(AT_MAX).findings
    assert finding.evidence["queue"].startswith("its oldest request has waited 900s")


def test_serverless_healthy_idle_and_cold(endpoints, infer, at):
    endpoints.serverless("quiet")  # no traffic: scaled to nothing, costs nothing, never idle
    endpoints.serverless("warm")
    endpoints.serverless_traffic("warm", at, invocations=50, model_latency_us=samples(80_000, 200_000),
                                 overhead_latency_us={9_000: 100}, model_setup_us={4_000_000: 2},
                                 concurrency_utilization=0.4)
    assert infer(INFERENCE_IDS).findings == []


def test_serverless_cold_starts_over_the_limit_are_a_warning(endpoints, infer, at):
    endpoints.serverless("classifier")
    endpoints.serverless_traffic("classifier", at, invocations=20, model_latency_us=samples(80_000, 200_000),
                                 model_setup_us={45_000_000: 3}, concurrency_utilization=0.2)
    [finding] = infer(LATENCY).findings
    assert finding.severity is Severity.WARNING and finding.evidence["breached"] == ["cold_start"]
    assert finding.evidence["cold_start_p90_ms"] == 45000.0 and finding.evidence["cold_starts"] == 30
    assert "ProvisionedConcurrency" in finding.summary
    assert infer(LATENCY, inference={"serverless_max_cold_start": "1m"}).findings == []


@pytest.mark.parametrize("share, saturated", [(1.0, True), (0.5, False)])
def test_serverless_concurrency_at_its_limit_is_saturation(endpoints, infer, at, share, saturated):
    endpoints.serverless("classifier", max_concurrency=5)
    endpoints.serverless_traffic("classifier", at, invocations=300, model_latency_us=samples(80_000, 200_000),
                                 concurrency_utilization=share)
    report = infer(SATURATION)
    assert report.errors == []
    if not saturated:
        assert report.findings == []
        return
    [finding] = report.findings
    assert finding.evidence["accelerator"] == "concurrency" and finding.evidence["utilization_percent"] == 100.0
    assert finding.evidence["serverless_max_concurrency"] == 5 and "MaxConcurrency" in finding.summary


def test_a_queue_that_has_just_drained_is_healthy(endpoints, infer, at):
    """The last age SageMaker reported was from before the queue emptied: no request waits now."""
    async_endpoint(endpoints)
    endpoints.async_traffic("batch-summaries", at, backlog=[30, 40, 50, 60, 70, 60, 40, 20, 5, 0],
                            oldest_age_s=[700, 760, 820, 880, 940, 900, 800, 700, 650, 650], processed=30)
    assert infer(LATENCY).findings == []
