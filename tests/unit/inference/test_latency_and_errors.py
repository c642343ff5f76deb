"""inference-latency-slo and inference-errors over real GetMetricData (percentiles from raw samples)."""

from __future__ import annotations

import pytest

from fmdoctor.demo.endpoint_builder import publish_node_metric
from fmdoctor.demo.endpoint_builder import samples as latency
from fmdoctor.engine.model import Severity

LATENCY = ["inference-latency-slo"]
ERRORS = ["inference-errors"]


def test_latency_within_slo_is_healthy(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.traffic("chat", at, model_latency_us=latency(120_000, 400_000), overhead_latency_us={5_000: 100},
                      invocations=100)
    report = infer(LATENCY)
    assert report.findings == [] and report.errors == []


def test_microseconds_are_read_as_microseconds(endpoints, infer, at):
    """400 000 us is 400 ms: under a 500 ms SLO. Read as milliseconds it would be a 400-second breach."""
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.traffic("chat", at, model_latency_us=latency(400_000, 450_000), invocations=100)
    assert infer(LATENCY, inference={"latency_p90_ms": 500, "latency_p99_ms": 2000}).findings == []
    [finding] = infer(LATENCY, inference={"latency_p90_ms": 399, "latency_p99_ms": 2000}).findings
    assert finding.evidence["model_latency_p90_ms"] == 400.0


def test_p90_over_slo_is_critical_and_names_the_model(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.12xlarge", instances=2)
    endpoints.traffic("chat", at, model_latency_us=latency(1_600_000, 3_200_000), overhead_latency_us={6_000: 100},
                      invocations=100)
    [finding] = infer(LATENCY).findings
    assert finding.severity is Severity.CRITICAL
    assert finding.resource == "endpoint/chat/variant/AllTraffic"
    ev = finding.evidence
    assert (ev["model_latency_p90_ms"], ev["model_latency_p99_ms"]) == (1600.0, 3200.0)
    assert (ev["overhead_latency_p90_ms"], ev["slo_p90_ms"], ev["breached"]) == (6.0, 500.0, ["p90", "p99"])
    assert ev["slow_part"] == "model" and "model container" in finding.summary
    assert "1600.0 ms" in finding.summary


def test_p99_alone_is_a_warning(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.traffic("chat", at, model_latency_us=latency(300_000, 2_500_000), invocations=100)
    [finding] = infer(LATENCY).findings
    assert finding.severity is Severity.WARNING and finding.evidence["breached"] == ["p99"]


def test_slow_platform_overhead_is_told_apart_from_a_slow_model(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.traffic("chat", at, model_latency_us=latency(50_000, 90_000),
                      overhead_latency_us=latency(700_000, 900_000), invocations=100)
    [finding] = infer(LATENCY).findings
    assert finding.evidence["slow_part"] == "platform"
    assert "SageMaker's overhead, not the model" in finding.summary


def test_fleet_latency_metric_in_configured_unit(builder, infer, at, aws):
    builder.security_group("serve")
    [slow] = builder.launch(["serve-1"], "g5.xlarge", "private-a", ["serve"], role="inference")
    [fast] = builder.launch(["serve-2"], "g5.xlarge", "private-a", ["serve"], role="inference")
    cw = aws.client("cloudwatch")
    publish_node_metric(cw, "LLMServer", "RequestLatency", slow, at, latency(0.9, 1.5, 0.05), unit="Seconds")
    publish_node_metric(cw, "LLMServer", "RequestLatency", fast, at, latency(0.2, 0.3, 0.05), unit="Seconds")
    report = infer(LATENCY, cluster="test-cluster",
                   inference={"latency_metric": "LLMServer/RequestLatency", "latency_unit": "seconds"})
    [finding] = report.findings
    assert finding.resource == slow and finding.evidence["latency_p90_ms"] == 900.0
    assert finding.evidence["requests"] == 1000


@pytest.mark.parametrize("errors_5xx, model_errors, expected", [(5, 0, 5.0), (0, 3, 3.0)])
def test_error_rate_over_threshold_is_critical(endpoints, infer, at, errors_5xx, model_errors, expected):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoints.traffic("chat", at, model_latency_us={20_000: 100}, invocations=100, errors_5xx=errors_5xx,
                      model_errors=model_errors)
    [finding] = infer(ERRORS).findings
    assert finding.severity is Severity.CRITICAL
    assert finding.evidence["error_rate_percent"] == expected
    assert finding.evidence["invocations"] == 1000
    assert finding.evidence["log_group"] == "/aws/sagemaker/Endpoints/chat"


def test_low_error_rate_and_no_traffic_are_healthy(endpoints, infer, at):
    endpoints.endpoint("busy", "ml.g4dn.xlarge")
    endpoints.endpoint("quiet", "ml.g4dn.xlarge")
    endpoints.traffic("busy", at, model_latency_us={20_000: 100}, invocations=1000, errors_5xx=2)  # 0.2 %
    report = infer(ERRORS)
    assert report.findings == [] and report.errors == []
