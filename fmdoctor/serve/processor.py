"""One message in, one outcome out: parse, de-duplicate, route, investigate, deliver; one log line per event.

Outcomes that acknowledge the message (it is deleted): delivered, duplicate, resolved, ignored, malformed,
too_large, unknown_event, unknown_cluster. A copy of an event another worker of this replica holds waits for
that worker (the heartbeat keeps it invisible meanwhile) and is then acknowledged as a duplicate, or handled as
the retry if that worker failed, so duplicates do not keep the queue from draining for a visibility timeout;
``in_progress`` (another replica holds it, or the wait ran out) leaves the copy on the queue. ``deferred`` (the
cluster could not be looked up for a reason that may pass: throttled, unreachable) leaves it too, for the
queue's redrive policy: an event is never acknowledged as unknown_cluster because AWS was busy.
A delivery that fails raises :class:`DeliveryFailed` and the message stays on the queue (retried after its
visibility timeout, moved to the dead-letter queue by the queue's redrive policy after its receive limit).
A cancelled investigation raises ``Cancelled``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from fmdoctor.serve.events import BadEvent, Event, parse_body
from fmdoctor.serve.investigate import Cancelled, Investigator
from fmdoctor.serve.routing import LookupUnavailable, Router
from fmdoctor.serve.state import Ledger, Metrics

log = logging.getLogger("fmdoctor.serve")

ACKNOWLEDGED = ("delivered", "duplicate", "resolved", "ignored", "malformed", "too_large", "unknown_event",
                "unknown_cluster")


class DeliveryFailed(Exception):
    """At least one output did not take the result; the message must stay on the queue."""


class Processor:
    def __init__(self, router: Router, investigator: Investigator, outputs: Sequence[Any], ledger: Ledger,
                 metrics: Metrics, max_event_bytes: int, hold_s: float = 120.0):
        self.router, self.investigator, self.outputs = router, investigator, list(outputs)
        self.ledger, self.metrics, self.max_event_bytes = ledger, metrics, max_event_bytes
        self.hold_s = hold_s  # how long a duplicate copy waits for the worker holding its event

    def handle_body(self, body: str | bytes, where: str, cancel: threading.Event | None = None) -> list[str]:
        """Every event of one message body; ``where`` names the message in log lines."""
        try:
            events = parse_body(body, self.max_event_bytes)
        except BadEvent as exc:
            self.metrics.count(exc.reason)
            log.warning("event %s acknowledged, not investigated: %s: %s", where, exc.reason, exc)
            return [exc.reason]
        return [self.handle(event, where, cancel) for event in events]

    def handle(self, event: Event, where: str, cancel: threading.Event | None = None) -> str:
        if not self.ledger.claim(event.id) and not (
                self.ledger.wait_released(event.id, self.hold_s, cancel) and self.ledger.claim(event.id)):
            # not acknowledged: if that worker fails, this copy is the retry
            return self._done(event, where, "in_progress", "the same event is being handled by another worker; "
                              "this copy stays on the queue until that one is done")
        try:
            return self._handle(event, where, cancel)
        finally:
            self.ledger.release(event.id)

    def _handle(self, event: Event, where: str, cancel: threading.Event | None) -> str:
        pending = [o for o in self.outputs if not self.ledger.done(f"{event.id}:{o.name}")]
        if self.outputs and not pending or self.ledger.done(event.id):
            return self._done(event, where, "duplicate", "already delivered")
        try:
            route = self.router.route(event)
        except LookupUnavailable as exc:
            return self._done(event, where, "deferred", str(exc), warn=True)
        if route.ignore:
            return self._done(event, where, "ignored", route.reason)
        if route.cluster is None:
            return self._done(event, where, "unknown_cluster", route.reason, warn=True)
        if not event.firing:
            told = [o.name for o in pending if hasattr(o, "send_resolved") and o.send_resolved(event.title,
                                                                                            event.repeat_key)]
            self.ledger.mark(event.id)
            return self._done(event, where, "resolved", f"{route.cluster}: told {', '.join(told) or 'no open thread'}")
        self.metrics.started()
        try:
            result = self.investigator.investigate(event, route, cancel)
        finally:
            self.metrics.finished()
        if result.report is not None:
            self.metrics.record(result.report)
        if cancel is not None and cancel.is_set():
            raise Cancelled(event.id)
        if not self.ledger.holds(event.id):  # another replica took it over: it posts, this copy comes back
            return self._done(event, where, "in_progress", "another replica took the event over while this one "
                              "investigated (its claim's lease ran out); this copy stays on the queue", warn=True)
        failed = []
        for output in pending:
            try:
                output.send(result)
            except Exception as exc:
                self.metrics.delivered(output.name, False)
                failed.append(f"{output.name} ({type(exc).__name__}: {str(exc)[:200]})")
                continue
            self.metrics.delivered(output.name, True)
            self.ledger.mark(f"{event.id}:{output.name}")
        if failed:
            self.metrics.count("delivery_failed")
            log.error("event %s %s (%s): delivery failed to %s; left on the queue to retry", where, event.id,
                      event.kind, ", ".join(failed))
            raise DeliveryFailed(", ".join(failed))
        self.ledger.mark(event.id)
        cause = f"; cause {result.cause.id}" if result.cause else ""
        return self._done(event, where, "delivered",
                          f"{route.cluster} via {route.reason}: {result.status}{cause}")

    def _done(self, event: Event, where: str, outcome: str, why: str, warn: bool = False) -> str:
        self.metrics.count(outcome)
        (log.warning if warn else log.info)("event %s %s (%s, %s): %s: %s", where, event.id, event.kind,
                                            event.title[:120], outcome, why)
        return outcome
