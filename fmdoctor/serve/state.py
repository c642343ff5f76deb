"""What a replica remembers: which deliveries are done (idempotency), its threads, and what ``/metrics`` shows.

The ledger records ``event id:output`` once that output has the result, so a redelivered message (SQS is
at-least-once; EventBridge may deliver an event twice) is acknowledged without a second post, and a retry
after a partial failure sends only to the outputs that did not get it. It is bounded and expires entries
after ``ttl_s`` (well past SQS's longest redelivery of a message that is still being retried).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from datetime import datetime

from fmdoctor.engine.model import Report, Severity, Status
from fmdoctor.report.prometheus import Exposition


class Ledger:
    """A bounded, expiring set of keys, plus the keys being worked on right now (claims)."""

    def __init__(self, ttl_s: float = 24 * 3600, max_size: int = 100_000, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self.max_size, self.clock = ttl_s, max_size, clock
        self._done: OrderedDict[str, float] = OrderedDict()
        self._claimed: set[str] = set()
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)

    def done(self, key: str) -> bool:
        with self._lock:
            self._expire()
            return key in self._done

    def mark(self, key: str) -> None:
        with self._lock:
            self._done[key] = self.clock()
            self._done.move_to_end(key)
            while len(self._done) > self.max_size:
                self._done.popitem(last=False)

    def claim(self, key: str) -> bool:
        """False while another worker of this replica holds the same event."""
        with self._lock:
            if key in self._claimed:
                return False
            self._claimed.add(key)
            return True

    def release(self, key: str) -> None:
        with self._lock:
            self._claimed.discard(key)
            self._released.notify_all()

    def wait_released(self, key: str, timeout_s: float, cancel: threading.Event | None = None) -> bool:
        """Wait until no worker of this replica holds ``key`` (True), or ``timeout_s``/``cancel`` (False)."""
        deadline = self.clock() + timeout_s
        with self._lock:
            while key in self._claimed:
                left = deadline - self.clock()
                if left <= 0 or (cancel is not None and cancel.is_set()):
                    return False
                self._released.wait(min(left, 0.5))
            return True

    def holds(self, key: str) -> bool:
        """Whether this replica still holds its claim on the event (a shared ledger's can be lost)."""
        with self._lock:
            return key in self._claimed

    def close(self) -> None:
        """Nothing to let go of in memory (a shared ledger stops renewing its leases)."""

    def _expire(self) -> None:
        now = self.clock()
        while self._done and now - next(iter(self._done.values())) > self.ttl_s:
            self._done.popitem(last=False)


class Metrics:
    """Counters of this replica and the last verdict per cluster and check, in the exposition format."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()
        self.deliveries: Counter[tuple[str, str]] = Counter()
        self.in_flight = 0
        self.in_flight_max = 0
        self._checks: dict[str, dict[str, tuple[dict[Severity, int], int]]] = {}
        self._clusters: dict[str, tuple[str, Status, datetime, float, int]] = {}
        self._lock = threading.Lock()

    def count(self, outcome: str) -> None:
        with self._lock:
            self.events[outcome] += 1

    def delivered(self, output: str, ok: bool) -> None:
        with self._lock:
            self.deliveries[(output, "ok" if ok else "failed")] += 1

    def started(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)

    def finished(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def record(self, report: Report) -> None:
        """Merge a (scoped) run: the checks it ran replace their last verdicts; the others keep theirs."""
        with self._lock:
            checks = self._checks.setdefault(report.cluster, {})
            for check in dict.fromkeys([*report.stats.checks_run, *(e.check for e in report.errors)]):
                counts = {s: sum(1 for f in report.findings if f.check == check and f.severity == s) for s in Severity}
                checks[check] = (counts, sum(1 for e in report.errors if e.check == check))
            status = _status(checks) if report.status != Status.UNKNOWN else Status.UNKNOWN
            self._clusters[report.cluster] = (report.region, status, report.generated_at, report.stats.duration_s,
                                              sum(report.stats.api_calls.values()))

    def render(self) -> str:
        exposition = Exposition()
        with self._lock:
            for cluster, (region, status, at, duration, calls) in sorted(self._clusters.items()):
                labels = {"cluster": cluster, "region": region}
                exposition.add("fmdoctor_status", labels, status.exit_code)
                for check, (counts, errors) in sorted(self._checks.get(cluster, {}).items()):
                    for severity in Severity:
                        exposition.add("fmdoctor_findings", {**labels, "check": check, "severity": severity.value},
                                       counts[severity])
                    exposition.add("fmdoctor_check_errors", {**labels, "check": check}, errors)
                exposition.add("fmdoctor_last_run_timestamp_seconds", labels, round(at.timestamp(), 3))
                exposition.add("fmdoctor_run_duration_seconds", labels, duration)
                exposition.add("fmdoctor_run_api_calls", labels, calls)
            for outcome, n in sorted(self.events.items()):
                exposition.add("fmdoctor_serve_events_total", {"outcome": outcome}, n)
            for (output, result), n in sorted(self.deliveries.items()):
                exposition.add("fmdoctor_serve_deliveries_total", {"output": output, "result": result}, n)
            exposition.add("fmdoctor_serve_in_flight", {}, self.in_flight)
            exposition.add("fmdoctor_serve_in_flight_max", {}, self.in_flight_max)
        return exposition.render()


def _status(checks: dict[str, tuple[dict[Severity, int], int]]) -> Status:
    if any(counts[Severity.CRITICAL] for counts, _ in checks.values()):
        return Status.CRITICAL
    if any(counts[Severity.WARNING] or errors for counts, errors in checks.values()):
        return Status.WARNING
    return Status.OK
