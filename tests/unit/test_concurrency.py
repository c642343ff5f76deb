"""The concurrency a run's round trips depend on (issue 39): a check waiting for shared data frees its worker,
GetMetricData batches are in flight together and start as each ListMetrics page arrives, and throttled calls
back off and are retried, never lost."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from fmdoctor.config import ClusterSettings
from fmdoctor.engine.api import new_aws
from fmdoctor.engine.aws import AwsOptions
from fmdoctor.engine.check import Check
from fmdoctor.engine.concurrency import all_at_once, settle_all
from fmdoctor.engine.context import RunScope, SharedData
from fmdoctor.engine.inventory import Inventory
from fmdoctor.engine.model import Severity
from fmdoctor.engine.runner import run_checks
from fmdoctor.metrics.cloudwatch import Query, Series, Sweep, fetch, queries_per_call
from fmdoctor.metrics.nodes import GPU, MetricSpec, plan_queries

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _scope() -> RunScope:
    return RunScope(cluster="c", settings=ClusterSettings(), aws=None, inventory=Inventory("c", "us-west-2"), now=NOW)


def _check(check_id: str, body) -> Check:
    cls = type(check_id.title().replace("-", ""), (Check,), {
        "id": check_id, "family": "test", "severity": Severity.WARNING, "iam_actions": (),
        "__doc__": "A test check.", "run": lambda self, ctx: body(ctx)})
    return cls()


def test_a_check_waiting_for_shared_data_frees_its_only_worker():
    """One worker: the first check waits for data whose load needs the second check to have run. A waiting check
    that kept its worker would deadlock here (the second never starts); the wait is bounded so a regression fails."""
    second_ran = threading.Event()

    def load():
        if not second_ran.wait(timeout=10):
            raise TimeoutError("the second check never started while the first waited")
        return "loaded"

    def first(ctx):
        assert ctx.shared("data", load) == "loaded"
        return []

    def second(ctx):
        second_ran.set()
        return []

    started = time.monotonic()
    outcome = run_checks(_scope(), [_check("waits", first), _check("frees", second)], max_workers=1)
    assert outcome.errors == [] and outcome.completed == ["waits", "frees"]
    assert time.monotonic() - started < 5


def test_one_load_for_every_check_that_asks_and_its_failure_for_each():
    calls = []

    def load():
        calls.append(1)
        time.sleep(0.05)
        raise PermissionError("denied once")

    def asks(ctx):
        ctx.shared("data", load)
        return []

    outcome = run_checks(_scope(), [_check(f"asks-{n}", asks) for n in range(4)], max_workers=2)
    assert len(calls) == 1
    assert sorted(e.check for e in outcome.errors) == [f"asks-{n}" for n in range(4)]
    assert {e.message for e in outcome.errors} == {"PermissionError: denied once"}


def test_a_started_load_is_shared_with_later_askers():
    shared = SharedData()
    future = shared.start("k", lambda: 7)
    assert shared.get("k", lambda: 8) == 7 and future.result() == 7


def test_all_at_once_keeps_order_and_bound():
    in_flight, peak, lock = [0], [0], threading.Lock()

    def work(n: int) -> int:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.02)
        with lock:
            in_flight[0] -= 1
        return n * n

    assert all_at_once(work, list(range(12)), limit=4) == [n * n for n in range(12)]
    assert 2 <= peak[0] <= 4


def test_all_at_once_raises_the_first_failure():
    def work(n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n

    with pytest.raises(ValueError, match="three"):
        all_at_once(work, list(range(6)), limit=2)


@pytest.fixture
def cloudwatch(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        aws = new_aws(AwsOptions(region="us-west-2"))
        client = aws.client("cloudwatch")
        start = NOW - timedelta(minutes=30)
        client.put_metric_data(Namespace="CWAgent", MetricData=[
            {"MetricName": "nvidia_smi_utilization_gpu", "Dimensions": [{"Name": "InstanceId", "Value": f"i-{n}"}],
             "Timestamp": start + timedelta(minutes=5), "Value": float(n)} for n in range(20)])
        yield aws, client


def _queries(count: int) -> list[Query]:
    return [Query(Series("CWAgent", "nvidia_smi_utilization_gpu", (("InstanceId", f"i-{n % 20}"),)), "Average")
            for n in range(count)]


def _window() -> tuple[datetime, datetime, timedelta]:
    return NOW - timedelta(minutes=30), NOW, timedelta(minutes=1)


POWER = MetricSpec(GPU, "utilization", "CWAgent", "nvidia_smi_power_draw", "Average")


def _put_two_listing_pages(client: Any, start: datetime) -> None:
    """600 series of one metric name, i-0000..i-0599 (value n), GPU index 0: two ListMetrics pages of 500."""
    client.put_metric_data(Namespace="CWAgent", MetricData=[
        {"MetricName": POWER.metric,
         "Dimensions": [{"Name": "InstanceId", "Value": f"i-{n:04d}"}, {"Name": "index", "Value": "0"}],
         "Timestamp": start + timedelta(minutes=5), "Value": float(n)} for n in range(600)])


def test_get_metric_data_batches_are_in_flight_together(cloudwatch):
    """Counted with botocore's own events around each call, moto answering after 50 ms (a round trip)."""
    aws, client = cloudwatch
    start, end, period = _window()
    per_call = queries_per_call(start, end, period)
    queries = _queries(per_call * 4)
    in_flight, peak, lock = [0], [0], threading.Lock()

    def before_call(**_):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])

    def after_call(**_):
        with lock:
            in_flight[0] -= 1

    client.meta.events.register("before-call.cloudwatch.GetMetricData", before_call)
    client.meta.events.register("after-call.cloudwatch.GetMetricData", after_call)
    client.meta.events.register_first("before-send.cloudwatch.GetMetricData", lambda **_: time.sleep(0.05))
    fetched = fetch(client, queries, start, end, period)
    assert fetched.calls == 4 and peak[0] >= 2
    assert [v for _, v in fetched.values[per_call * 3 + 5]] == [5.0]  # every batch's answer kept, by query id
    assert aws.calls.snapshot()["cloudwatch.GetMetricData"] == 4


def test_throttled_batches_back_off_and_their_data_still_arrives(cloudwatch):
    """CloudWatch answers ThrottlingException to the first attempt of every batch: each is retried (after the
    retry mode's backoff) and the result is the same as unthrottled."""
    aws, client = cloudwatch
    start, end, period = _window()
    queries = _queries(queries_per_call(start, end, period) * 3)
    expected = fetch(client, queries, start, end, period).values
    throttled: set[str] = set()
    lock = threading.Lock()

    def throttle(request, **_):
        key = request.body if isinstance(request.body, bytes) else str(request.body).encode()
        with lock:
            if key in throttled:
                return None  # the retry goes through to moto
            throttled.add(key)
        if "smithy-protocol" in request.headers:
            body = (bytes([0xA2, 0x66]) + b"__type" + bytes([0x73]) + b"ThrottlingException" + bytes([0x67])
                    + b"message" + bytes([0x6D]) + b"Rate exceeded")
            headers = {"Content-Type": "application/cbor", "smithy-protocol": "rpc-v2-cbor"}
        else:  # the JSON protocol moto's CloudWatch speaks
            body = b'{"__type": "ThrottlingException", "message": "Rate exceeded"}'
            headers = {"Content-Type": "application/x-amz-json-1.0"}
        return AWSResponse(request.url, 400, headers, _Raw(body))

    client.meta.events.register_first("before-send.cloudwatch.GetMetricData", throttle)
    got = fetch(client, queries, start, end, period)
    assert got.values == expected and len(throttled) == 3 and got.calls == 3
    assert aws.options.max_attempts > 1 and client.meta.config.retries["mode"] == "adaptive"


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_):
        yield self._body

    def read(self, *_):
        body, self._body = self._body, b""
        return body


def test_settle_all_hands_each_call_its_own_outcome():
    def fails() -> int:
        raise ValueError("denied")

    ok, failed = settle_all([lambda: 7, fails])
    assert ok() == 7
    with pytest.raises(ValueError, match="denied"):
        failed()


def test_get_metric_data_for_a_listing_page_starts_before_the_next_page_returns(cloudwatch):
    """600 series of one metric name list in two ListMetrics pages (500 a page, NextToken-chained). The second
    page's answer is held back 300 ms: the GetMetricData batch of the first page's 500 series must already be
    on its way, and the sweep must still make ceil(600 / 500) = 2 calls and keep every series' value."""
    aws, client = cloudwatch
    start, end, period = _window()
    _put_two_listing_pages(client, start)
    events: list[str] = []
    lock = threading.Lock()

    def before_list(params, **_):
        if "NextToken" in params:
            time.sleep(0.3)

    def after_list(parsed, **_):
        with lock:
            events.append("ListMetrics" + (" (more)" if parsed.get("NextToken") else " (last)"))

    def before_data(**_):
        with lock:
            events.append("GetMetricData")

    client.meta.events.register("before-parameter-build.cloudwatch.ListMetrics", before_list)
    client.meta.events.register("after-call.cloudwatch.ListMetrics", after_list)
    client.meta.events.register("before-call.cloudwatch.GetMetricData", before_data)
    spec = POWER
    sweep = Sweep(client, start, end, period)
    plan = plan_queries(client, [spec], lambda _, s: s.dim("InstanceId"), lambda _: ("InstanceId", []),
                        lambda _: ("index",), end - start, sweep=sweep)
    fetched = sweep.close()
    assert events[:3] == ["ListMetrics (more)", "GetMetricData", "ListMetrics (last)"]
    assert events.count("GetMetricData") == 2 and fetched.calls == 2
    assert aws.calls.snapshot()["cloudwatch.GetMetricData"] == 2
    assert len(plan.queries) == 600 and sorted(plan.indices) == list(range(600))
    values = {q.series.dim("InstanceId"): fetched.values[i][0][1]
              for q, i in zip(plan.queries, plan.indices, strict=True)}
    assert values["i-0000"] == 0.0 and values["i-0599"] == 599.0 and len(values) == 600


def test_a_node_with_two_dimension_sets_fetches_both_and_keeps_the_chosen_one(cloudwatch):
    """The chosen set (per GPU, ``index``) is known only once the listing ends, so the other set's series was
    already queued: it is fetched and set aside, never mixed into the node's devices."""
    _, client = cloudwatch
    start, end, period = _window()
    stamp = start + timedelta(minutes=5)
    client.put_metric_data(Namespace="CWAgent", MetricData=[
        {"MetricName": "nvidia_smi_utilization_gpu", "Timestamp": stamp, "Value": 90.0,
         "Dimensions": [{"Name": "InstanceId", "Value": "i-two"}, {"Name": "index", "Value": "0"}]},
        {"MetricName": "nvidia_smi_utilization_gpu", "Timestamp": stamp, "Value": 1.0,
         "Dimensions": [{"Name": "InstanceId", "Value": "i-two"}]}])
    spec = MetricSpec(GPU, "utilization", "CWAgent", "nvidia_smi_utilization_gpu", "Average")
    sweep = Sweep(client, start, end, period)
    plan = plan_queries(client, [spec], lambda _, s: s.dim("InstanceId") if s.dim("InstanceId") == "i-two" else None,
                        lambda _: ("InstanceId", []), lambda _: ("index",), end - start, sweep=sweep)
    fetched = sweep.close()
    assert plan.keys == ((0, "i-two", "0"),)
    assert [v for _, v in fetched.values[plan.indices[0]]] == [90.0]
    assert len(fetched.values) == 2  # the instance-level series was fetched, and is not in the plan
