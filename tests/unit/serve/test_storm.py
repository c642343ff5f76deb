"""Issue 35 item 12: a throttled look-up never loses an event. Events go in as message bodies (``handle_body``,
what the SQS consumer and the webhook call) against the demo world in moto; DescribeInstances answers
``Throttling`` (botocore's ClientError, as after its own retries) while a test says so."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from botocore.exceptions import ClientError

from fmdoctor.engine.model import CheckError, Report, RunStats, Status
from fmdoctor.serve.investigate import Investigator, Result
from fmdoctor.serve.processor import ACKNOWLEDGED, Processor
from fmdoctor.serve.queue import SqsConsumer
from fmdoctor.serve.routing import Route, Router
from fmdoctor.serve.service import instance_lookup
from fmdoctor.serve.state import Ledger, Metrics

from .test_processor import spot_warning
from .test_queue import visible


class Flaky:
    """The real instance look-up, throttled (or denied) while ``failing`` is set; counts the calls that reach it."""

    def __init__(self, doctor, code: str = "Throttling"):
        self.real, self.code = instance_lookup(doctor), code
        self.failing = True
        self.calls = 0

    def __call__(self, kind, ids):
        self.calls += 1
        if self.failing:
            raise ClientError({"Error": {"Code": self.code, "Message": "Rate exceeded"}}, "DescribeInstances")
        return self.real(kind, ids)


def processor_for(served, lookup) -> Processor:
    return Processor(Router(served.doctor.settings, lookup), served.investigator, [served.slack], Ledger(),
                     Metrics(), 256 * 1024)


def test_a_throttled_lookup_leaves_the_spot_warning_for_a_retry(served, fake_slack):
    interrupted = served.world.facts["spot"]["interrupted"]
    flaky = Flaky(served.doctor)
    processor = processor_for(served, flaky)
    [outcome] = processor.handle_body(spot_warning(interrupted, "storm-1"), "sqs:m-1")
    assert outcome == "deferred" and outcome not in ACKNOWLEDGED  # the message stays: the redrive policy decides
    assert fake_slack.of("chat.postMessage") == []
    flaky.failing = False  # the throttling passed: the message's next receive is investigated
    assert processor.handle_body(spot_warning(interrupted, "storm-1"), "sqs:m-1 (receive 2)") == ["delivered"]


def test_access_denied_is_still_no_configured_cluster(served):
    interrupted = served.world.facts["spot"]["interrupted"]
    processor = processor_for(served, Flaky(served.doctor, "UnauthorizedOperation"))
    assert processor.handle_body(spot_warning(interrupted, "denied-1"), "sqs:m-2") == ["unknown_cluster"]


def test_routing_remembers_which_cluster_an_instance_is_in(served):
    interrupted = served.world.facts["spot"]["interrupted"]
    flaky = Flaky(served.doctor)
    flaky.failing = False
    router = Router(served.doctor.settings, flaky)
    events = [spot_warning(interrupted, f"e-{n}") for n in range(40)]
    from fmdoctor.serve.events import parse_body

    threads = [threading.Thread(target=lambda b=b: router.route(parse_body(b, 1 << 18)[0])) for b in events]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert flaky.calls == 1  # 40 events, concurrent, about one instance: one DescribeInstances


class ThrottledOnceDoctor:
    """A Doctor whose first run met throttling (its report says so in its errors), the later ones did not."""

    def __init__(self):
        self.calls = 0

    def check(self, cluster, only=None, cancel=None):
        self.calls += 1
        errors = [CheckError(check="spot-interruption", code="Throttling", unverified="Spot requests")] \
            if self.calls == 1 else []
        return Report(cluster=cluster, region="us-west-2", generated_at=datetime.now(UTC), status=Status.UNKNOWN,
                      errors=errors, stats=RunStats(checks_run=["spot-interruption"]))


def test_a_run_made_while_aws_throttled_is_not_reused(served):
    from fmdoctor.serve.events import parse_body

    doctor = ThrottledOnceDoctor()
    investigator = Investigator(doctor, reuse_s=600)  # type: ignore[arg-type]
    route = Route("llm-train", ("spot",), "test")
    first = investigator.investigate(parse_body(spot_warning("i-0123456789abcdef0", "a"), 1 << 18)[0], route)
    second = investigator.investigate(parse_body(spot_warning("i-0123456789abcdef0", "b"), 1 << 18)[0], route)
    third = investigator.investigate(parse_body(spot_warning("i-0123456789abcdef0", "c"), 1 << 18)[0], route)
    assert doctor.calls == 2  # the throttled run was not shared; the clean one was
    assert first.report.errors and not second.report.errors and third.report is second.report


class SlowInvestigator:
    """Investigations take a second: long enough for the second copy of an event to arrive meanwhile."""

    def investigate(self, event, route, cancel=None):
        time.sleep(1.0)
        return Result(event, route.cluster, route.checks)


class OneCluster:
    def route(self, event):
        return Route("llm-train", ("spot",), "test")


def test_a_duplicate_held_in_progress_does_not_stall_the_queue(aws):
    client = aws.client("sqs")
    url = client.create_queue(QueueName="storm")["QueueUrl"]
    for _ in range(2):  # EventBridge (or SQS) delivered the same event twice
        client.send_message(QueueUrl=url, MessageBody=spot_warning("i-0123456789abcdef0", "same-event"))
    metrics = Metrics()
    processor = Processor(OneCluster(), SlowInvestigator(), [], Ledger(), metrics, 1 << 18)  # type: ignore[arg-type]
    consumer = SqsConsumer(client, url, processor, concurrency=2, visibility_s=60, wait_s=1)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while visible(client, url) and time.monotonic() < deadline:
        time.sleep(0.1)
    consumer.stop.set()
    thread.join(timeout=30)
    assert visible(client, url) == 0  # both copies deleted well inside the 60 s visibility timeout
    assert metrics.events == {"delivered": 1, "duplicate": 1}
