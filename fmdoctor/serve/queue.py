"""The SQS consumer: at-least-once, bounded, and safe to run as several replicas on one queue.

- It receives only as many messages as it has free workers (``serve.concurrency``), so memory is bounded
  by the concurrency, not by the queue's depth.
- While an event is investigated, a heartbeat extends its message's visibility (ChangeMessageVisibility)
  so no other replica receives it; if this replica dies, the heartbeat stops and the message comes back
  after the visibility timeout.
- A message is deleted only after its result is delivered (or it was acknowledged as a duplicate, a bad
  event or one for no configured cluster). A failure leaves it alone: it is received again after the
  visibility timeout, and the queue's redrive policy moves a poison message to the dead-letter queue.
- On SIGTERM it stops receiving at once: a pending long poll (``serve.wait_time``, up to 20 s) is abandoned,
  not waited for (it runs in a thread of its own, and whatever it still receives is released at once); then
  the in-flight events get ``serve.shutdown_grace`` to finish, and the rest are cancelled and their messages
  released (visibility 0) for another replica.

docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html and
.../sqs-dead-letter-queues.html describe the visibility and redrive behaviour relied on here.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.serve.investigate import Cancelled
from fmdoctor.serve.processor import ACKNOWLEDGED, DeliveryFailed, Processor

log = logging.getLogger("fmdoctor.serve")


@dataclass
class InFlight:
    message_id: str
    receipt: str
    extended_at: float
    cancel: threading.Event = field(default_factory=threading.Event)


class SqsConsumer:
    def __init__(self, sqs: Any, queue_url: str, processor: Processor, concurrency: int = 4,
                 visibility_s: int = 120, wait_s: int = 20, grace_s: float = 30.0):
        self.sqs, self.queue_url, self.processor = sqs, queue_url, processor
        self.concurrency, self.visibility_s, self.wait_s, self.grace_s = concurrency, visibility_s, wait_s, grace_s
        self._in_flight: dict[str, InFlight] = {}
        self._changed = threading.Condition()
        self.stop = threading.Event()
        self._closed = threading.Event()  # the heartbeat runs until the in-flight messages are settled

    def run(self) -> None:
        """Receive and handle until ``stop`` is set; then drain or release what is in flight."""
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="fmdoctor-serve")
        heartbeat = threading.Thread(target=self._heartbeat, name="fmdoctor-serve-heartbeat", daemon=True)
        heartbeat.start()
        try:
            while not self.stop.is_set():
                free = self._wait_for_free_worker()
                if free == 0:
                    continue
                try:
                    reply = self._receive(free)
                except Exception as exc:  # throttled, network: back off and keep serving
                    log.warning("ReceiveMessage failed (%s); retrying in 5s", type(exc).__name__)
                    self.stop.wait(5)
                    continue
                if reply is None:  # stopped while the long poll was pending
                    break
                for message in reply.get("Messages") or []:
                    if self.stop.is_set():  # received while shutting down: hand it straight back
                        self._release(message["ReceiptHandle"], message["MessageId"])
                        continue
                    item = InFlight(message["MessageId"], message["ReceiptHandle"], time.monotonic())
                    with self._changed:
                        self._in_flight[item.message_id] = item
                    pool.submit(self._work, message, item)
        finally:
            self._shutdown()
            self._closed.set()
            pool.shutdown(wait=False, cancel_futures=True)

    def _receive(self, free: int) -> dict[str, Any] | None:
        """One long poll, in a thread of its own so ``stop`` need not wait for it: None when stopped first (the
        poll's messages, if it still gets some, are released as it returns)."""
        state: dict[str, Any] = {}
        lock = threading.Lock()
        finished = threading.Event()

        def poll() -> None:
            try:
                state["reply"] = self.sqs.receive_message(
                    QueueUrl=self.queue_url, MaxNumberOfMessages=min(10, free), WaitTimeSeconds=self.wait_s,
                    VisibilityTimeout=self.visibility_s, MessageSystemAttributeNames=["ApproximateReceiveCount"])
            except Exception as exc:
                state["error"] = exc
            with lock:
                finished.set()
                abandoned = state.get("abandoned", False)
            if abandoned:
                for message in (state.get("reply") or {}).get("Messages") or []:
                    self._release(message["ReceiptHandle"], message["MessageId"])

        threading.Thread(target=poll, name="fmdoctor-serve-receive", daemon=True).start()
        while not finished.wait(0.2):
            with lock:
                if self.stop.is_set() and not finished.is_set():
                    state["abandoned"] = True
                    return None
        if "error" in state:
            raise state["error"]
        reply: dict[str, Any] = state["reply"]
        return reply

    def _wait_for_free_worker(self) -> int:
        with self._changed:
            if len(self._in_flight) >= self.concurrency:
                self._changed.wait(1.0)
            return max(0, self.concurrency - len(self._in_flight))

    def _work(self, message: dict[str, Any], item: InFlight) -> None:
        receives = (message.get("Attributes") or {}).get("ApproximateReceiveCount", "?")
        where = f"sqs:{item.message_id} (receive {receives})"
        try:
            outcomes = self.processor.handle_body(message.get("Body") or "", where, item.cancel)
            if all(o in ACKNOWLEDGED for o in outcomes):
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=item.receipt)
        except Cancelled:
            log.info("event %s cancelled by shutdown; its message is released for another replica", where)
        except DeliveryFailed:
            pass  # logged by the processor; the message comes back after its visibility timeout
        except Exception:
            log.exception("event %s failed; left on the queue (its redrive policy decides when to give up)", where)
        finally:
            with self._changed:
                self._in_flight.pop(item.message_id, None)
                self._changed.notify_all()

    def _heartbeat(self) -> None:
        """Extend the visibility of every message in flight a third of the way into its timeout."""
        every = max(0.2, self.visibility_s / 3)
        while not self._closed.wait(min(every, 1.0)):
            now = time.monotonic()
            with self._changed:
                due = [i for i in self._in_flight.values() if now - i.extended_at >= every]
            for item in due:
                try:
                    self.sqs.change_message_visibility(QueueUrl=self.queue_url, ReceiptHandle=item.receipt,
                                                       VisibilityTimeout=self.visibility_s)
                    item.extended_at = now
                except Exception as exc:  # the message may be done (deleted) meanwhile
                    log.debug("could not extend %s: %s", item.message_id, type(exc).__name__)

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.grace_s
        with self._changed:
            while self._in_flight and time.monotonic() < deadline:
                self._changed.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            left = list(self._in_flight.values())
        for item in left:
            item.cancel.set()
            self._release(item.receipt, item.message_id)
        if left:
            log.warning("shutdown: released %d in-flight message(s) for another replica", len(left))

    def _release(self, receipt: str, message_id: str) -> None:
        try:
            self.sqs.change_message_visibility(QueueUrl=self.queue_url, ReceiptHandle=receipt, VisibilityTimeout=0)
        except Exception as exc:
            log.warning("could not release %s (%s); it returns after its visibility timeout", message_id,
                        type(exc).__name__)
