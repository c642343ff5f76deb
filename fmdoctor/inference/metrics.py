"""CloudWatch GetMetricData, batched: every query of a run in ceil(queries / 500) calls (plus result pages).

Each query asks for one statistic over the whole window as a single period, so a percentile is the
percentile of the window (not an average of per-minute percentiles) and a Sum is the window's total.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

QUERIES_PER_CALL = 500  # GetMetricData's limit on MetricDataQueries


@dataclass(frozen=True)
class MetricQuery:
    """One statistic of one metric; ``key`` is the caller's name for the answer."""

    key: tuple[str, ...]
    namespace: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    stat: str


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
    """Values by query key; a query with no datapoints in the window is absent from the result."""
    values: dict[tuple[str, ...], float] = {}
    for start in range(0, len(queries), QUERIES_PER_CALL):
        batch = list(queries[start:start + QUERIES_PER_CALL])
        by_id = {f"q{i}": q for i, q in enumerate(batch)}
        collected: dict[str, list[float]] = {}
        for page in cloudwatch.get_paginator("get_metric_data").paginate(
            MetricDataQueries=[_request(query_id, q, window.period_s) for query_id, q in by_id.items()],
            StartTime=window.start,
            EndTime=window.end,
        ):
            for result in page.get("MetricDataResults", []):
                collected.setdefault(result["Id"], []).extend(float(v) for v in result.get("Values", []))
        for query_id, found in collected.items():
            if found:
                values[by_id[query_id].key] = combine(by_id[query_id].stat, found)
    return values


def _request(query_id: str, query: MetricQuery, period_s: int) -> dict[str, Any]:
    return {
        "Id": query_id,
        "MetricStat": {
            "Metric": {
                "Namespace": query.namespace,
                "MetricName": query.metric,
                "Dimensions": [{"Name": n, "Value": v} for n, v in query.dimensions],
            },
            "Period": period_s,
            "Stat": query.stat,
        },
        "ReturnData": True,
    }


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
