"""CloudWatch GetMetricData, batched: every query of a run in ceil(queries / 500) calls (plus result pages).

Each query asks for one statistic over the whole window as a single period, so a percentile is the
percentile of the window (not an average of per-minute percentiles) and a Sum is the window's total.
The few series whose trend matters (an asynchronous endpoint's backlog) are read again minute by minute
(:func:`fetch_series`), in ceil(queries / 500) calls of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.metrics.cloudwatch import Query, Series, fetch


@dataclass(frozen=True)
class MetricQuery:
    """One statistic of one metric; ``key`` is the caller's name for the answer."""

    key: tuple[str, ...]
    namespace: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    stat: str

    def query(self) -> Query:
        return Query(Series(self.namespace, self.metric, tuple(sorted(self.dimensions))), self.stat)


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @property
    def period_s(self) -> int:
        return int((self.end - self.start).total_seconds())


def window_ending(now: datetime, length: timedelta) -> Window:
    """The window that ends at the last whole minute: CloudWatch aligns periods to minutes."""
    end = now.replace(second=0, microsecond=0)
    return Window(end - length, end)


def fetch_metrics(cloudwatch: Any, queries: Sequence[MetricQuery], window: Window) -> dict[tuple[str, ...], float]:
    """Values by query key; a query with no datapoints in the window (or one CloudWatch could not answer) is
    absent from the result. Batching is :func:`fmdoctor.metrics.cloudwatch.fetch`'s, the run's one reader."""
    fetched = fetch(cloudwatch, [q.query() for q in queries], window.start, window.end,
                    timedelta(seconds=window.period_s))
    return {queries[i].key: combine(queries[i].stat, [v for _, v in points])
            for i, points in fetched.values.items() if points}


def fetch_series(cloudwatch: Any, queries: Sequence[MetricQuery], window: Window,
                 period: timedelta = timedelta(minutes=1)) -> dict[tuple[str, ...], list[float]]:
    """Each query's values period by period, oldest first; a query with no datapoints is absent."""
    fetched = fetch(cloudwatch, [q.query() for q in queries], window.start, window.end, period)
    return {queries[i].key: [v for _, v in points] for i, points in fetched.values.items() if points}


def combine(stat: str, values: Iterable[float]) -> float:
    """One value for the window when CloudWatch split it into more than one period (an unaligned start).

    Sums add up; extremes and percentiles take the worst period (conservative: a percentile of the whole
    window is never above the highest per-period one); averages are averaged.
    """
    found = list(values)
    if stat in ("Sum", "SampleCount"):
        return sum(found)
    if stat == "Minimum":
        return min(found)
    if stat == "Average":
        return sum(found) / len(found)
    return max(found)
