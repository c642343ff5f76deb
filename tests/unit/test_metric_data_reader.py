"""GetMetricData and ListMetrics pages read with json.loads (fmdoctor.metrics.cloudwatch) give what botocore's
own parser gives, with one datetime per distinct timestamp, and a page cut short is an error, never less data."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from moto import mock_aws

from fmdoctor.engine.api import new_aws
from fmdoctor.engine.aws import AwsOptions
from fmdoctor.engine.responses import CorruptResponse
from fmdoctor.metrics.cloudwatch import Query, Series, discover, fetch, read_list_metrics, read_metric_data

NOW = datetime.now(UTC).replace(second=0, microsecond=0)


@pytest.fixture
def cloudwatch(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = new_aws(AwsOptions(region="us-west-2")).client("cloudwatch")
        client.put_metric_data(Namespace="CWAgent", MetricData=[
            {"MetricName": "nvidia_smi_utilization_gpu", "Dimensions": [{"Name": "InstanceId", "Value": f"i-{n}"}],
             "Timestamp": NOW - timedelta(minutes=minute), "Value": float(n * 10 + minute)}
            for n in range(4) for minute in (2, 5, 9)])
        yield client


def _queries() -> list[Query]:
    return [Query(Series("CWAgent", "nvidia_smi_utilization_gpu", (("InstanceId", f"i-{n}"),)), stat)
            for n in range(4) for stat in ("Average", "Maximum")]


def test_the_reader_gives_what_botocore_gives(cloudwatch):
    start, end = NOW - timedelta(minutes=15), NOW
    queries = _queries()
    # botocore's own parser: the same queries asked directly, before fetch() puts the reader on this client
    page = cloudwatch.get_metric_data(
        MetricDataQueries=[{"Id": f"q{n}", "MetricStat": {"Metric": q.series.to_api(), "Period": 60, "Stat": q.stat},
                            "ReturnData": True} for n, q in enumerate(queries)],
        StartTime=start, EndTime=end, ScanBy="TimestampAscending")
    expected = {int(r["Id"][1:]): sorted(zip(r["Timestamps"], r["Values"], strict=True))
                for r in page["MetricDataResults"]}
    got = fetch(cloudwatch, queries, start, end, timedelta(minutes=1)).values
    assert got == expected and len(got) == 8 and all(len(points) == 3 for points in got.values())
    assert [v for _, v in got[2]] == [19.0, 15.0, 12.0]  # i-1 9, 5 and 2 minutes ago: oldest first
    stamps = {id(t) for points in got.values() for t, _ in points}
    assert len(stamps) == 3  # one datetime per distinct period start, shared by every series


@pytest.mark.parametrize("body", [b'{"MetricDataResults": [{"Id": "q0", "Timestamps": [1', b"not json"])
def test_a_page_that_does_not_parse_is_an_error(body):
    response = {"status_code": 200, "headers": {"content-type": "application/x-amz-json-1.0"}, "body": body}
    with pytest.raises(CorruptResponse):
        read_metric_data(response, {})


def test_an_error_answer_is_left_to_botocore():
    response = {"status_code": 400, "headers": {"content-type": "application/x-amz-json-1.0"}, "body": b"{}"}
    customized: dict = {}
    read_metric_data(response, customized)
    assert customized == {} and response["body"] == b"{}"


def test_the_listing_reader_gives_what_botocore_gives(cloudwatch):
    """ListMetrics pages read with json.loads: the same series, token and paging as botocore's own parse."""
    cloudwatch.put_metric_data(Namespace="CWAgent", MetricData=[
        {"MetricName": "nvidia_smi_power_draw", "Timestamp": NOW, "Value": 1.0,
         "Dimensions": [{"Name": "InstanceId", "Value": f"i-{n:04d}"}, {"Name": "index", "Value": str(n % 8)}]}
        for n in range(600)])
    bodies: list[bytes] = []
    cloudwatch.meta.events.register("before-parse.cloudwatch.ListMetrics",
                                    lambda response_dict, **_: bodies.append(bytes(response_dict["body"])))
    expected = [page for page in cloudwatch.get_paginator("list_metrics").paginate(
        Namespace="CWAgent", MetricName="nvidia_smi_power_draw")]  # before discover() puts the reader on
    response = {"status_code": 200, "headers": {"content-type": "application/x-amz-json-1.0"}, "body": bodies[0]}
    customized: dict = {}
    read_list_metrics(response, customized)
    assert customized["Metrics"] == expected[0]["Metrics"] and len(customized["Metrics"]) == 500
    assert json.loads(response["body"]) == {"NextToken": expected[0]["NextToken"]}  # left to botocore: the token
    read: list[list[dict]] = []
    cloudwatch.meta.events.register("after-call.cloudwatch.ListMetrics",
                                    lambda parsed, **_: read.append(parsed["Metrics"]))
    listing = discover(cloudwatch, "CWAgent", "nvidia_smi_power_draw", lambda s: True)
    assert listing.calls == len(expected) == 2 and len(listing.series) == 600
    assert read == [page["Metrics"] for page in expected]  # page by page, the shapes botocore gives
    assert set(listing.series) == {Series.from_api(m) for page in expected for m in page["Metrics"]}


def test_a_listing_page_that_does_not_parse_is_an_error():
    response = {"status_code": 200, "headers": {"content-type": "application/x-amz-json-1.0"},
                "body": b'{"Metrics": [{"Namespace": "CWAgent", "Metr'}
    with pytest.raises(CorruptResponse):
        read_list_metrics(response, {})
