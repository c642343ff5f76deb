"""Handle each Slack event once. Slack redelivers an event it thinks timed out (``X-Slack-Retry-Num``,
``retry_attempt`` in Socket Mode) with the same ``event_id``; a retry of one we already took is answered
200 and dropped, so a mention is never answered twice nor a check run twice."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from slack_bolt.response import BoltResponse

log = logging.getLogger(__name__)


class SeenEvents:
    """A bounded, expiring set of event ids (Slack retries within minutes; an hour is plenty)."""

    def __init__(self, ttl_s: float = 3600.0, max_size: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self.max_size, self.clock = ttl_s, max_size, clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, event_id: str) -> bool:
        """True the first time ``event_id`` is offered (and records it), False for every repeat."""
        now = self.clock()
        with self._lock:
            while self._seen and now - next(iter(self._seen.values())) > self.ttl_s:
                self._seen.popitem(last=False)
            if event_id in self._seen:
                return False
            self._seen[event_id] = now
            while len(self._seen) > self.max_size:
                self._seen.popitem(last=False)
            return True


def dedupe_middleware(seen: SeenEvents) -> Callable[..., Any]:
    """A bolt global middleware: events whose id was seen before are acknowledged and go no further."""

    def drop_repeats(body: dict[str, Any], req: Any, next_: Callable[[], Any]) -> Any:
        event_id = body.get("event_id") if isinstance(body, dict) else None
        if event_id and not seen.first_time(str(event_id)):
            retry = (req.headers.get("x-slack-retry-num") or ["?"])[0] if req is not None else "?"
            log.info("dropping redelivered event %s (retry %s)", event_id, retry)
            return BoltResponse(status=200, body="")
        return next_()

    return drop_repeats
