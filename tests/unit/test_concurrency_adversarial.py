"""Issue 39's concurrent loading, attacked: a request made twice, loads that wait on one another, a listing page
failing after GetMetricData batches left, waiting checks and loads on few workers, a HyperPod target whose
discovery call did not answer.

The rules under test: every AWS request is made once per run; a failure is reported (not verified) under every
check that needed it once every call it started has ended, never as healthy, never as "no such target"; no
arrangement of shared loads hangs the run.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import Aws, AwsOptions
from fmdoctor.engine.runner import run_checks
from fmdoctor.metrics.cloudwatch import Sweep
from fmdoctor.metrics.nodes import plan_queries

from ..fault_injection import FaultInjector
from .test_concurrency import POWER, _check, _put_two_listing_pages, _Raw, _scope, _window, cloudwatch  # noqa: F401  (cloudwatch: moto's CloudWatch fixture)


class Requests:
    """Every request the sessions it makes send, as (service, operation, parameters): a request made twice in one
    run is the same round trip paid twice."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()

    def factory(self, options: AwsOptions, credentials: Any = None) -> Aws:
        aws = new_aws(options, credentials)
        aws.session.events.register("provide-client-params", self._record)
        return aws

    def _record(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        key = (model.service_model.service_name, model.name, json.dumps(params, sort_keys=True, default=str))
        with self._lock:
            self.seen[key] += 1

    def repeated(self) -> list[tuple[str, str, str, int]]:
        return [(s, o, p[:200], n) for (s, o, p), n in self.seen.items() if n > 1]

    def operations(self) -> set[tuple[str, str]]:
        return {(s, o) for s, o, _ in self.seen}


@pytest.fixture
def demo():
    from fmdoctor.demo.runtime import demo_environment, demo_settings

    with demo_environment() as world:
        yield world, demo_settings(world)


def _demo_doctor(demo, factory: Callable[..., Aws]) -> Doctor:
    world, settings = demo
    return Doctor(settings=settings, connection=Connection(region=world.region), aws_factory=factory)


def test_the_demo_check_makes_no_request_twice(demo):
    """The demo holds every kind of target (EC2 nodes, a HyperPod cluster, endpoints, queues, logs); each request
    is made once. DescribeCluster and ListClusterNodes were made twice, by checks keeping their own memo keys."""
    requests = Requests()
    report = _demo_doctor(demo, requests.factory).check(demo[0].cluster)
    assert report.findings and requests.seen
    assert requests.repeated() == []
    assert {("sagemaker", "DescribeCluster"), ("sagemaker", "ListClusterNodes")} <= requests.operations()


def test_a_listing_page_failing_after_a_batch_left_reports_the_listing_once_the_batch_ended(cloudwatch):  # noqa: F811
    """600 series list in two pages; the first page's 500 queries leave as a GetMetricData batch, and the second
    page fails (an expired token) while that batch is still in flight. The run reports the listing's failure
    (not the sweep's), sends nothing more, and only once the batch has ended: no call runs on behind the
    report. The batch answers once the failure is raised, or after a second when the failure waits for it."""
    aws, client = cloudwatch
    start, end, period = _window()
    _put_two_listing_pages(client, start)
    batch_sent, raised = threading.Event(), threading.Event()
    in_flight, lock = [0], threading.Lock()

    def count(delta: int) -> Callable[..., None]:
        def change(**_: Any) -> None:
            with lock:
                in_flight[0] += delta
        return change

    def hold_batch(**_: Any) -> None:
        batch_sent.set()
        raised.wait(1.0)

    def expired(request: Any, **_: Any) -> AWSResponse | None:
        if b"NextToken" not in (request.body or b""):
            return None
        assert batch_sent.wait(10), "the first page's batch never left"
        body = b'{"__type": "InvalidNextToken", "message": "The token has expired"}'
        return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.0"}, _Raw(body))

    events = client.meta.events
    events.register("before-call.cloudwatch.GetMetricData", count(+1))
    events.register("after-call.cloudwatch.GetMetricData", count(-1))
    events.register("after-call-error.cloudwatch.GetMetricData", count(-1))
    events.register_first("before-send.cloudwatch.GetMetricData", hold_batch)
    events.register_first("before-send.cloudwatch.ListMetrics", expired)
    spec = POWER
    sweep = Sweep(client, start, end, period)
    try:
        with pytest.raises(ClientError) as failed:
            plan_queries(client, [spec], lambda _, s: s.dim("InstanceId"), lambda _: ("InstanceId", []),
                         lambda _: ("index",), end - start, sweep=sweep)
        still_running = in_flight[0]
    finally:
        raised.set()
    assert failed.value.response["Error"]["Code"] == "InvalidNextToken"
    assert still_running == 0
    assert aws.calls.snapshot()["cloudwatch.GetMetricData"] == 1  # the last 100 queries were never sent


def _run_bounded(work: Callable[[], Any], seconds: float = 20) -> Any:
    """``work()`` in a thread of its own; a run still going after ``seconds`` is a hang (the thread is left)."""
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the run hung"
    return out["result"]


def test_loads_that_wait_on_each_other_fail_every_asker_instead_of_hanging():
    """Two checks start two loads at once; each load asks for the other's data. Each would wait for the other for
    ever; the load that closes the circle fails, the other fails with it, and both checks report it."""
    both_started = threading.Barrier(2, timeout=10)

    def load(mine: str, other: str) -> Callable[[], str]:
        def loader() -> str:
            both_started.wait()  # both loads are under way before either asks for the other's data
            return mine + ctx_of[mine].shared(other, load(other, mine))
        return loader

    ctx_of: dict[str, Any] = {}

    def asks(mine: str, other: str) -> Callable[[Any], list[Any]]:
        def body(ctx: Any) -> list[Any]:
            ctx_of[mine] = ctx
            ctx.shared(mine, load(mine, other))
            return []
        return body

    outcome = _run_bounded(lambda: run_checks(_scope(), [_check("wants-a", asks("a", "b")),
                                                         _check("wants-b", asks("b", "a"))], max_workers=2))
    assert sorted(e.check for e in outcome.errors) == ["wants-a", "wants-b"] and outcome.completed == []
    assert {e.message for e in outcome.errors} == {"SharedDataCycle: shared data that wait on one another: a -> b"} \
        or {e.message for e in outcome.errors} == {"SharedDataCycle: shared data that wait on one another: b -> a"}


def test_a_load_asking_for_its_own_key_fails_instead_of_hanging():
    def loader() -> int:
        return ctx_box[0].shared("self", loader) + 1

    ctx_box: list[Any] = []

    def body(ctx: Any) -> list[Any]:
        ctx_box.append(ctx)
        ctx.shared("self", loader)
        return []

    outcome = _run_bounded(lambda: run_checks(_scope(), [_check("recurses", body)], max_workers=1))
    assert [(e.check, e.code) for e in outcome.errors] == [("recurses", "InternalError")]
    assert "SharedDataCycle" in outcome.errors[0].message


@pytest.mark.parametrize("fault", ["throttle", "timeout"])
def test_a_hyperpod_target_sagemaker_does_not_answer_is_unknown_not_missing(demo, retry_sleeps, fault):
    """The demo's HyperPod cluster is a target no EC2 instance names; discovery finds it with DescribeCluster. That
    call throttled past its retries (or timing out) leaves the target unread (exit 3, the failure named), never "no
    such cluster", which reads as a typo of the user's. A denial still means "not found here" (a mistyped EC2
    cluster name on an account without SageMaker access)."""
    from fmdoctor.engine.errors import TargetNotFound

    world, _ = demo
    faults = FaultInjector()
    if fault == "throttle":
        faults.throttle("sagemaker", "DescribeCluster", code="ThrottlingException")
    else:
        faults.drop("sagemaker", "DescribeCluster", "timeout")
    target = world.facts["hyperpod"]["cluster"]
    report = _demo_doctor(demo, faults.aws_factory).check(target, only=["hyperpod-node-unhealthy"])
    [error] = report.errors
    assert error.check == "inventory" and error.code in {"ThrottlingException", "Timeout"}
    assert report.exit_code == 3
    denied = FaultInjector().deny("sagemaker", "DescribeCluster")
    with pytest.raises(TargetNotFound):
        _demo_doctor(demo, denied.aws_factory).check(target, only=["hyperpod-node-unhealthy"])


def test_checks_waiting_on_nested_loads_never_exhaust_the_workers():
    """Ten checks on two workers, each waiting for a load that waits, inline, for a second load; every second load
    needs all ten under way at once (a barrier). A waiting check or load holding a worker would stop the barrier
    short of ten and fail every check."""
    count = 10
    all_nested = threading.Barrier(count, timeout=10)

    def check(n: int) -> Callable[[Any], list[Any]]:
        def body(ctx: Any) -> list[Any]:
            outer = ctx.shared(f"outer-{n}", lambda: ctx.shared(f"inner-{n}", lambda: all_nested.wait() + 1000))
            assert outer >= 1000
            return []
        return body

    outcome = _run_bounded(lambda: run_checks(_scope(), [_check(f"nested-{n}", check(n)) for n in range(count)],
                                              max_workers=2))
    assert outcome.errors == [] and len(outcome.completed) == count
