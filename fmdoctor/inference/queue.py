"""The SLO of an asynchronous endpoint: its queue, not a request latency.

An asynchronous endpoint queues requests and may process each for up to an hour, so the real-time p90/p99
SLO never applies to it; what users wait on is the queue (docs.aws.amazon.com/sagemaker/latest/dg/
async-inference-monitor.html). Two signals, read minute by minute over the window:
- ApproximateAgeOfOldestRequest (seconds): the latest minute's value over ``inference.async_max_age``
  means requests wait longer than the SLO now (critical);
- ApproximateBacklogSize: a mean over the last third of the window ``inference.async_backlog_growth_percent``
  above the first third's (and at least one request more) means requests arrive faster than they are
  processed (warning): the age will follow.
A queue empty at the latest minute is healthy whatever it was before and whatever the instance count,
including an endpoint scaled to zero (an age reported before it emptied is not a request waiting now).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmdoctor.config import ClusterSettings
from fmdoctor.engine.endpoints import Endpoint
from fmdoctor.engine.model import Severity
from fmdoctor.inference.signals import Signals

MIN_POINTS_FOR_TREND = 6  # two minutes in each third at least


@dataclass(frozen=True)
class Queue:
    """What an asynchronous endpoint's queue looked like over the window."""

    backlog: float | None  # the latest minute's ApproximateBacklogSize
    oldest_age_s: float | None  # the latest minute's ApproximateAgeOfOldestRequest
    backlog_early: float | None  # mean over the first third of the window
    backlog_late: float | None  # mean over the last third
    minutes: int  # minutes with a backlog datapoint

    @property
    def seen(self) -> bool:
        return self.backlog is not None

    def growing(self, growth_percent: float) -> bool:
        if self.backlog_early is None or self.backlog_late is None:
            return False
        rise = self.backlog_late - self.backlog_early
        return rise >= 1.0 and rise >= self.backlog_early * growth_percent / 100.0

    def breach(self, settings: ClusterSettings) -> QueueBreach | None:
        """Critical when the oldest request is older than the SLO, a warning when only the backlog grows."""
        slo = settings.inference
        if not self.backlog:
            return None  # empty at the latest minute: whatever it was, the queue has caught up
        too_old = self.oldest_age_s is not None and self.oldest_age_s > slo.async_max_age.total_seconds()
        growing = self.growing(slo.async_backlog_growth_percent)
        if not too_old and not growing:
            return None
        reasons = (("oldest request",) if too_old else ()) + (("growing backlog",) if growing else ())
        return QueueBreach(Severity.CRITICAL if too_old else Severity.WARNING, reasons)


@dataclass(frozen=True)
class QueueBreach:
    severity: Severity
    reasons: tuple[str, ...]  # "oldest request", "growing backlog"


def queue_of(sig: Signals, endpoint: Endpoint) -> Queue:
    backlog = sig.minutes(endpoint.resource, "backlog")
    ages = sig.minutes(endpoint.resource, "oldest_age_s")
    early = late = None
    if len(backlog) >= MIN_POINTS_FOR_TREND:
        third = len(backlog) // 3
        early, late = sum(backlog[:third]) / third, sum(backlog[-third:]) / third
    return Queue(backlog[-1] if backlog else None, ages[-1] if ages else None, early, late, len(backlog))


def describe(queue: Queue, endpoint: Endpoint, settings: ClusterSettings) -> str:
    """The queue in words, for summaries."""
    parts = []
    if queue.oldest_age_s is not None:
        parts.append(f"its oldest request has waited {queue.oldest_age_s:.0f}s "
                     f"(SLO {settings.inference.async_max_age.total_seconds():.0f}s)")
    if queue.backlog_early is not None and queue.backlog_late is not None and queue.growing(
            settings.inference.async_backlog_growth_percent):
        parts.append(f"its backlog grew from {queue.backlog_early:.0f} to {queue.backlog_late:.0f} requests")
    return " and ".join(parts) or f"its backlog is {queue.backlog:.0f} requests"


def queue_evidence(queue: Queue, endpoint: Endpoint, settings: ClusterSettings) -> dict[str, object]:
    return {
        "approximate_backlog_size": _round(queue.backlog),
        "approximate_age_of_oldest_request_s": _round(queue.oldest_age_s),
        "backlog_first_third_mean": _round(queue.backlog_early),
        "backlog_last_third_mean": _round(queue.backlog_late),
        "minutes_with_data": queue.minutes,
        "async_max_age_s": settings.inference.async_max_age.total_seconds(),
        "async_backlog_growth_percent": settings.inference.async_backlog_growth_percent,
        "max_concurrent_invocations_per_instance": endpoint.async_max_concurrency,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
