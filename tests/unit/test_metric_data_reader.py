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


# -- the GetMetricData request written with json.dumps, the page read with json.loads: tables of small cases -------

def _series(*dims: tuple[str, str]) -> Series:
    return Series("CWAgent", "nvidia_smi_utilization_gpu", tuple(sorted(dims)))


def _canned_client(answer: bytes):
    """A JSON-protocol CloudWatch client whose every request is recorded and answered ``answer`` before it leaves
    (botocore's before-send), so what the serializer (or the writer) produced is read byte for byte."""
    import boto3

    client = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-west-2").client(
        "cloudwatch", endpoint_url="http://127.0.0.1:9")
    sent: list[dict] = []

    def answer_here(request, **_):
        from botocore.awsrequest import AWSResponse

        sent.append({"body": json.loads(request.body), "target": request.headers.get("X-Amz-Target")})

        class Raw:
            def stream(self, **_):
                yield answer

        return AWSResponse(request.url, 200, {"content-type": "application/x-amz-json-1.0",
                                              "content-length": str(len(answer))}, Raw())

    client.meta.events.register("before-send.cloudwatch.GetMetricData", answer_here)
    return client, sent


WRITER_CASES = {
    "one query by instance": ([Query(_series(("InstanceId", "i-1")), "Average")], {}),
    "per GPU, several dimension sets": ([
        Query(_series(("InstanceId", "i-1"), ("index", "0"), ("name", "NVIDIA A100")), "Maximum"),
        Query(_series(("host", "ip-10-0-0-1"), ("index", "0")), "Average"),
        Query(_series(("InstanceId", "i-1")), "Sum")], {}),
    "no dimensions": ([Query(Series("CWAgent", "nvidia_smi_power_draw", ()), "Average")], {}),
    "odd characters, an extended statistic": ([Query(_series(("host", "x"), ("n", 'a "q" \\ é/')), "p99")], {}),
    "a later page (NextToken)": ([Query(_series(("InstanceId", "i-2")), "Average")], {"NextToken": "tok=="}),
}


@pytest.mark.parametrize("queries,extra", WRITER_CASES.values(), ids=WRITER_CASES.keys())
def test_the_request_written_is_what_botocore_writes(queries, extra):
    """The writer's body decodes to the same request botocore's serializer makes (the same target, queries,
    times, ScanBy and token): only who walks the queries differs."""
    from fmdoctor.metrics.cloudwatch import _reader

    start, end = NOW - timedelta(minutes=15), NOW
    params = dict(MetricDataQueries=[{"Id": f"q{n}", "MetricStat": {"Metric": q.series.to_api(), "Period": 60,
                                                                     "Stat": q.stat}, "ReturnData": True}
                                     for n, q in enumerate(queries)],
                  StartTime=start, EndTime=end, ScanBy="TimestampAscending", **extra)
    page = b'{"MetricDataResults": []}'
    plain, by_botocore = _canned_client(page)
    plain.get_metric_data(**params)
    written, by_writer = _canned_client(page)
    _reader(written)
    written.get_metric_data(**params)
    assert by_writer == by_botocore and len(by_writer[0]["body"]["MetricDataQueries"]) == len(queries)
    assert by_writer[0]["body"]["MetricDataQueries"][0]["MetricStat"]["Metric"] == queries[0].series.to_api()


def test_queries_held_by_one_call_never_reach_another():
    """The queries ride in each call's own context: a call made while none is held (a caller's own client, a
    serializer of another protocol) is left as botocore wrote it."""
    from fmdoctor.metrics.cloudwatch import hold_metric_data_queries, write_metric_data_queries

    context: dict = {}
    assert hold_metric_data_queries({"MetricDataQueries": []}, context=context) is None and context == {}
    request = {"body": b'{"MetricDataQueries": []}'}
    write_metric_data_queries(request, context={})
    assert request["body"] == b'{"MetricDataQueries": []}'


def _body(**page) -> bytes:
    return json.dumps(page).encode()


RESULT = {"Id": "q0", "Label": "util", "Timestamps": [1_700_000_060, 1_700_000_000], "Values": [5.0, 7.5],
          "StatusCode": "Complete"}
READER_CASES = {  # GetMetricData's documented JSON answer (MetricDataResults, NextToken, Messages)
    "empty results": _body(MetricDataResults=[], Messages=[]),
    "no results key": _body(),
    "a result with no datapoints": _body(MetricDataResults=[{"Id": "q0", "Label": "util", "Timestamps": [],
                                                             "Values": [], "StatusCode": "Complete"}]),
    "a result missing its lists": _body(MetricDataResults=[{"Id": "q0", "StatusCode": "Complete"}]),
    "two results, newest first": _body(MetricDataResults=[RESULT, dict(RESULT, Id="q1", Values=[1, 2])]),
    "partial data with a NextToken": _body(MetricDataResults=[dict(RESULT, StatusCode="PartialData")],
                                           NextToken="next=="),
    "messages, the page's and a result's": _body(
        MetricDataResults=[dict(RESULT, StatusCode="InternalError",
                                Messages=[{"Code": "InternalError", "Value": "try again"}])],
        Messages=[{"Code": "MaxQueryTimeRangeExceed", "Value": "the range was cut"}]),
    "fractional and ISO timestamps": _body(MetricDataResults=[dict(RESULT, Timestamps=[1_700_000_000.5,
                                                                                       "2023-11-14T22:14:20Z"])]),
}


@pytest.mark.parametrize("body", READER_CASES.values(), ids=READER_CASES.keys())
def test_the_page_read_is_what_botocore_parses(body):
    """The reader's part and botocore's parse of what it leaves, merged as botocore merges them, equal botocore's
    parse of the whole page (datetimes compared as instants)."""
    import boto3
    from botocore.parsers import create_parser

    model = boto3.client("cloudwatch", region_name="us-west-2", aws_access_key_id="a",
                         aws_secret_access_key="b").meta.service_model.operation_model("GetMetricData")
    headers = {"content-type": "application/x-amz-json-1.0", "content-length": str(len(body))}
    expected = create_parser("json").parse({"status_code": 200, "headers": dict(headers), "body": body},
                                           model.output_shape)
    response = {"status_code": 200, "headers": dict(headers), "body": body}
    customized: dict = {}
    read_metric_data(response, customized, operation_model=model)
    got = create_parser("json").parse(response, model.output_shape)
    got.update(customized)
    expected.pop("ResponseMetadata", None)
    got.pop("ResponseMetadata", None)
    assert got == expected
    assert int(response["headers"]["content-length"]) == len(response["body"])  # what botocore was left, whole


def test_a_page_decoded_by_the_session_check_is_not_decoded_again():
    """The session's check_response leaves the JSON it decoded; the reader takes that object, not a new parse."""
    from fmdoctor.engine.responses import DECODED

    body = _body(MetricDataResults=[RESULT])
    decoded = json.loads(body)
    first = decoded["MetricDataResults"][0]
    response = {"status_code": 200, "headers": {"content-type": "application/x-amz-json-1.0"}, "body": body,
                DECODED: (body, decoded)}
    customized: dict = {}
    read_metric_data(response, customized)
    assert customized["MetricDataResults"][0] is first and DECODED not in response


def test_a_listing_shares_equal_strings_and_pairs_across_its_series():
    """Series read with one ``shared`` memo are equal to those read without, and hold one object per distinct
    dimension pair and name (JSON decoding makes each occurrence anew)."""
    dims = [[{"Name": "InstanceId", "Value": "i-1"}, {"Name": "index", "Value": i}] for i in ("1", "0")]
    page = json.loads(json.dumps([{"Namespace": "CWAgent", "MetricName": "m", "Dimensions": d} for d in dims]))
    shared: dict = {}
    one, two = (Series.from_api(raw, shared) for raw in page)
    assert [one, two] == [Series.from_api(raw) for raw in page]
    assert one.dimensions[0] is two.dimensions[0] and one.namespace is two.namespace and one.name is two.name
    assert one.dimensions == (("InstanceId", "i-1"), ("index", "1"))  # sorted, as without the memo


def test_a_sweep_takes_each_batch_in_as_it_is_read(cloudwatch):
    """fetch() over several batches keeps every query's values by its index, with the calls counted once."""
    start, end = NOW - timedelta(minutes=15), NOW
    queries = _queries() * 80  # 640 queries: two batches at 500 a call
    got = fetch(cloudwatch, queries, start, end, timedelta(minutes=1))
    assert got.calls == 2 and len(got.values) == 640 and not got.failed
    assert got.values[1] == got.values[1 + 8 * 70] and len(got.values[639]) == 3
