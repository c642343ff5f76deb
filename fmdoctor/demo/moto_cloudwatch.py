"""Make moto's CloudWatch answer like CloudWatch for the series counts a GPU cluster has.

Two gaps in moto 5.x, patched on its backend class (real AWS needs none of this):

* ListMetrics repeats a metric once per datapoint when it has two or more dimensions (its dimension
  comparison matches only single-dimension sets), and de-duplicates in quadratic time. CloudWatch lists each
  series (namespace, name, exact dimension set) once. Replaced by a listing of the series index (below) with
  the same filter.
* GetMetricData scans every stored datapoint for every query and period (queries x periods x datapoints:
  hours for a 1,000-node cluster), ignores the query's namespace when dimensions are given, and accepts any
  number of queries. Metric-stat queries are answered from an index of the datapoints instead, with the
  same period bucketing and statistics code, and more than 500 queries are refused as CloudWatch does.
  Requests with metric-math or Metrics Insights expressions still go to moto's own implementation.

And one shortcut for seeding worlds moto keeps in this process (:func:`put_metric_data`): the datapoints go to
the backend's own PutMetricData, as moto's request handler hands them over, without botocore serialising a
request of a thousand datapoints and moto parsing it back.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, timedelta
from typing import Any

MAX_QUERIES = 500


def install() -> None:
    from moto.cloudwatch.models import CloudWatchBackend

    if getattr(CloudWatchBackend, "_fmdoctor_patched", False):
        return
    CloudWatchBackend.get_filtered_metrics = _get_filtered_metrics
    original = CloudWatchBackend.get_metric_data

    @functools.wraps(original)
    def get_metric_data(self: Any, queries: list[dict[str, Any]], start_time: Any, end_time: Any,
                        scan_by: str = "TimestampAscending") -> list[dict[str, Any]]:
        from moto.cloudwatch.exceptions import ValidationError

        if len(queries) > MAX_QUERIES:
            raise ValidationError(
                f"The collection MetricDataQueries must not have a size greater than {MAX_QUERIES}."
            )
        if any("Expression" in q for q in queries):
            return original(self, queries, start_time, end_time, scan_by)
        return _metric_stat_data(self, queries, start_time, end_time, scan_by)

    CloudWatchBackend.get_metric_data = get_metric_data
    CloudWatchBackend._fmdoctor_patched = True


def _series_key(namespace: str, name: str, dimensions: Any) -> tuple[str, str, frozenset[tuple[str, str]]]:
    return namespace, name, frozenset((d.name, d.value) for d in dimensions)


def _get_filtered_metrics(self: Any, metric_name: str, namespace: str, dimensions: list[dict[str, str]]) -> list[Any]:
    """Each series once, as its first datapoint (in moto's order), if it passes moto's own filter. The filter
    reads only a datapoint's namespace, name and dimension set, so judging one datapoint per series from the
    index answers as scanning them all did, in time per series rather than per datapoint."""
    return [data[0] for data in _index(self).values()
            if data[0].filter(namespace=namespace, name=metric_name, dimensions=dimensions)]


def _index(backend: Any) -> dict[tuple[str, str, frozenset[tuple[str, str]]], list[Any]]:
    """Datapoints by series, rebuilt only when datapoints were added (moto only ever appends them)."""
    cached = getattr(backend, "_fmdoctor_index", None)
    if cached is None or cached[0] != len(backend.metric_data):
        index: dict[tuple[str, str, frozenset[tuple[str, str]]], list[Any]] = {}
        for datum in backend.metric_data:
            index.setdefault(_series_key(datum.namespace, datum.name, datum.dimensions), []).append(datum)
        cached = (len(backend.metric_data), index)
        backend._fmdoctor_index = cached
    index = dict(cached[1])
    for datum in backend.aws_metric_data:  # computed by moto on every call (S3 storage metrics)
        key = _series_key(datum.namespace, datum.name, datum.dimensions)
        index[key] = [*index.get(key, ()), datum]  # never append to the cached lists
    return index


def _metric_stat_data(self: Any, queries: list[dict[str, Any]], start_time: Any, end_time: Any,
                      scan_by: str) -> list[dict[str, Any]]:
    from moto.cloudwatch.exceptions import ValidationError
    from moto.cloudwatch.models import Dimension, Statistics

    start_time = start_time.replace(microsecond=0)
    end_time = end_time.replace(microsecond=0)
    if start_time >= end_time:
        raise ValidationError("The parameter EndTime must be greater than StartTime.")
    index = _index(self)

    results = []
    for query in queries:
        stat = query["MetricStat"]
        metric = stat["Metric"]
        dims = [Dimension(d["Name"], d["Value"]) for d in metric.get("Dimensions", [])]
        key = _series_key(metric["Namespace"], metric["MetricName"], dims)
        data = [d for d in index.get(key, ()) if start_time <= d.timestamp < end_time]
        if stat.get("Unit"):
            data = [d for d in data if d.unit == stat["Unit"]]
        delta = timedelta(seconds=int(stat["Period"]))
        buckets: dict[int, list[Any]] = {}
        for datum in data:
            buckets.setdefault(int((datum.timestamp - start_time) / delta), []).append(datum)
        timestamps, values = [], []
        for bucket in sorted(buckets):
            stats = Statistics([stat["Stat"]], start_time + bucket * delta)
            stats.metric_data = buckets[bucket]
            timestamps.append(stats.timestamp)
            values.append(stats.get_statistics_for_type(stat["Stat"]))
        if scan_by == "TimestampDescending":
            timestamps.reverse()
            values.reverse()
        if query.get("ReturnData", True):
            label = query.get("Label") or f"{metric['MetricName']} {stat['Stat']}"
            results.append({"id": query["Id"], "label": label, "values": values, "timestamps": timestamps,
                            "status_code": "Complete"})
    return results


def backend_answering(session: Any, region: str) -> Any:
    """moto's CloudWatch backend that answers ``session``'s calls in ``region``, when moto answers them in this
    process (``mock_aws``, or a ``ThreadedMotoServer`` started here: both keep their worlds in moto's backends).
    The account is the one moto gives the session's credentials (GetCallerIdentity), so it is the backend the
    session's own PutMetricData would have reached."""
    from moto.backends import get_backend

    account = session.client("sts", region_name=region).get_caller_identity()["Account"]
    return get_backend("cloudwatch")[account][region]


def put_metric_data(backend: Any, namespace: str, datums: Sequence[Mapping[str, Any]]) -> None:
    """PutMetricData's ``MetricData`` (as a client takes it) into ``backend``, as moto's handler passes a parsed
    request to it: the same validation and storage. Timestamps arrive as moto's request parser makes them (naive,
    UTC); a timestamp with a fraction of a second would be rounded by the wire protocol in ways that vary with it,
    so only whole seconds are taken (the demo's publisher stamps whole seconds)."""
    parsed = []
    for datum in datums:
        entry = dict(datum)
        stamp = entry.get("Timestamp")
        if stamp is not None:
            if stamp.microsecond:
                raise ValueError(f"a timestamp with a fraction of a second: {stamp.isoformat()}")
            entry["Timestamp"] = stamp.astimezone(UTC).replace(tzinfo=None) if stamp.tzinfo else stamp
        parsed.append(entry)
    backend.put_metric_data(namespace, parsed)
