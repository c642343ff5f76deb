"""InferenceSettings validation, and the CloudWatch percentiles moto_compat teaches moto."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.config import parse_settings
from fmdoctor.engine.errors import ConfigError
from fmdoctor.inference.metrics import MetricQuery, fetch_metrics, window_ending


@pytest.mark.parametrize("yaml_text, message", [
    ("inference: {latency_metric: RequestLatency}\n", "is not 'Namespace/MetricName'"),
    ("inference: {window: 90s}\n", "whole number of minutes"),
    ("inference: {latency_unit: hours}\n", "latency_unit"),
])
def test_bad_inference_settings_name_the_key(yaml_text, message):
    with pytest.raises(ConfigError, match=message):
        parse_settings(yaml_text)


def test_namespaces_with_slashes_are_fine():
    settings = parse_settings("inference: {latency_metric: /my/app/Latency, latency_unit: seconds, window: 1h}\n")
    assert settings.inference.latency_metric.rsplit("/", 1) == ["/my/app", "Latency"]
    assert settings.inference.window == timedelta(hours=1)


def test_percentiles_from_raw_samples_and_none_from_statistic_sets(aws):
    now = datetime.now(UTC)
    cw = aws.client("cloudwatch")
    dims = [{"Name": "EndpointName", "Value": "e"}]
    cw.put_metric_data(Namespace="AWS/SageMaker", MetricData=[
        {"MetricName": "ModelLatency", "Dimensions": dims, "Timestamp": now - timedelta(minutes=3),
         "Values": [1_000, 2_000, 900_000], "Counts": [80, 15, 5]},
        {"MetricName": "Aggregated", "Dimensions": dims, "Timestamp": now - timedelta(minutes=3),
         "StatisticValues": {"SampleCount": 2, "Sum": 10, "Minimum": 1, "Maximum": 9}},
    ])
    queries = [MetricQuery((metric, stat), "AWS/SageMaker", metric, (("EndpointName", "e"),), stat)
               for metric, stat in [("ModelLatency", "p90"), ("ModelLatency", "p95"), ("ModelLatency", "p99"),
                                    ("ModelLatency", "SampleCount"), ("Aggregated", "p90"), ("Aggregated", "Sum")]]
    values = fetch_metrics(cw, queries, window_ending(now + timedelta(minutes=1), timedelta(minutes=15)))
    # Nearest rank over 100 samples: the 90th and 95th are 2 000 us, the 99th 900 000 us.
    assert values == {("ModelLatency", "p90"): 2_000.0, ("ModelLatency", "p95"): 2_000.0,
                      ("ModelLatency", "p99"): 900_000.0, ("ModelLatency", "SampleCount"): 100.0,
                      ("Aggregated", "Sum"): 10.0}
