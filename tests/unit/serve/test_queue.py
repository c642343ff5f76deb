"""The SQS consumer against moto's SQS: delete after delivery, leave failures for the redrive policy, extend
visibility while busy, bounded in-flight, and release what is in flight on shutdown."""

from __future__ import annotations

import threading
import time

import pytest

from fmdoctor.serve.investigate import Cancelled
from fmdoctor.serve.processor import DeliveryFailed
from fmdoctor.serve.queue import SqsConsumer


class StubProcessor:
    """Stands in for the processor: records bodies, and fails, blocks or acknowledges as a test asks."""

    def __init__(self, block: threading.Event | None = None):
        self.seen: list[str] = []
        self.block = block
        self.active = 0
        self.most = 0
        self.lock = threading.Lock()

    def handle_body(self, body, where, cancel=None):
        with self.lock:
            self.seen.append(body)
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            if body == "poison":
                raise DeliveryFailed("slack (SlackApiError)")
            if self.block is not None:
                while not self.block.is_set():
                    if cancel is not None and cancel.is_set():
                        raise Cancelled(body)
                    time.sleep(0.02)
            return ["delivered"]
        finally:
            with self.lock:
                self.active -= 1


@pytest.fixture
def sqs(aws):
    client = aws.client("sqs")
    url = client.create_queue(QueueName="fmdoctor-events")["QueueUrl"]
    return client, url


def run_until(consumer: SqsConsumer, done, timeout: float = 20.0) -> None:
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)
    consumer.stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()


def visible(client, url) -> int:
    attrs = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def test_delivered_messages_are_deleted_and_failures_stay(sqs):
    client, url = sqs
    for body in ("a", "b", "poison", "c"):
        client.send_message(QueueUrl=url, MessageBody=body)
    processor = StubProcessor()
    consumer = SqsConsumer(client, url, processor, concurrency=2, visibility_s=30, wait_s=0, grace_s=1)
    run_until(consumer, lambda: len(processor.seen) >= 4)
    assert sorted(processor.seen) == ["a", "b", "c", "poison"]
    assert visible(client, url) == 1  # the poison message stays for the redrive policy
    assert processor.most <= 2


def test_in_flight_is_bounded_by_the_concurrency(sqs):
    client, url = sqs
    for i in range(30):
        client.send_message(QueueUrl=url, MessageBody=f"m{i}")
    processor = StubProcessor()
    consumer = SqsConsumer(client, url, processor, concurrency=3, visibility_s=30, wait_s=0, grace_s=1)
    run_until(consumer, lambda: len(processor.seen) >= 30)
    assert len(set(processor.seen)) == 30 and processor.most <= 3
    assert visible(client, url) == 0


def test_visibility_is_extended_while_busy_and_released_on_shutdown(sqs):
    client, url = sqs
    client.send_message(QueueUrl=url, MessageBody="slow")
    block = threading.Event()
    processor = StubProcessor(block)
    consumer = SqsConsumer(client, url, processor, concurrency=1, visibility_s=1, wait_s=0, grace_s=0.5)
    extended = []
    real = client.change_message_visibility

    def spy(**kwargs):
        extended.append(kwargs["VisibilityTimeout"])
        return real(**kwargs)

    client.change_message_visibility = spy
    # Busy for 3x the visibility timeout: without the heartbeat the message would come back meanwhile.
    run_until(consumer, lambda: extended.count(1) >= 3, timeout=10)
    assert processor.seen == ["slow"]  # received once: the heartbeat kept it invisible
    assert extended[-1] == 0  # shutdown released it for another replica at once
    again = client.receive_message(QueueUrl=url, WaitTimeSeconds=0)["Messages"]
    assert again[0]["Body"] == "slow"


def test_stop_does_not_wait_for_the_pending_long_poll(sqs):
    """Issue 35 item 11: SIGTERM (``stop``) while ReceiveMessage waits its 20 s on an empty queue."""
    client, url = sqs
    consumer = SqsConsumer(client, url, StubProcessor(), concurrency=2, visibility_s=30, wait_s=20, grace_s=5)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    time.sleep(1.0)  # the long poll is pending
    stopped = time.monotonic()
    consumer.stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive() and time.monotonic() - stopped < 5  # not the rest of the 20 s poll


def test_a_message_the_abandoned_poll_still_receives_is_released(sqs):
    client, url = sqs
    consumer = SqsConsumer(client, url, StubProcessor(), concurrency=2, visibility_s=300, wait_s=3, grace_s=1)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    time.sleep(0.5)
    consumer.stop.set()
    thread.join(timeout=10)
    client.send_message(QueueUrl=url, MessageBody="late")  # arrives while the abandoned poll still waits
    time.sleep(4)  # past the poll's 3 s: it received the message (or nothing), and returned
    attrs = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "1"  # visible again at once, not after its 300 s
    [again] = client.receive_message(QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"]
                                     )["Messages"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"  # the abandoned poll did receive it, and let go
