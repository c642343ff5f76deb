"""Publish fmdoctor's verdicts as CloudWatch metrics, so CloudWatch alarms can page on them.

Metrics (namespace ``fmdoctor`` unless configured), one datum each per run:

- ``Findings`` {Cluster, Check, Severity}: findings of a check that ran, 0 included (alarms resolve).
- ``CheckErrors`` {Cluster, Check}: parts of a check that could not be verified.
- ``Status`` {Cluster}: 0 ok, 1 warning, 2 critical, 3 unknown (the exit code).

From a fleet report every datum also has ``Account`` and ``Region``, so same-named clusters in two
accounts stay apart. PutMetricData takes at most 1,000 metrics and 1 MB a call: data are batched to
both limits, so the call count is ceil(metrics / 1000) for reports of ordinary size. This is the one
fmdoctor operation that writes: it needs ``cloudwatch:PutMetricData`` (and nothing else).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fmdoctor.engine.api import Doctor
from fmdoctor.engine.errors import AwsUnavailable, credentials_error, describe_aws_failure
from fmdoctor.engine.model import Report, Severity
from fmdoctor.fleet.model import FleetReport

MAX_METRICS_PER_CALL = 1000
MAX_BYTES_PER_CALL = 900_000  # under the API's 1 MB, leaving room for the envelope
IAM_ACTION = "cloudwatch:PutMetricData"


def report_metric_data(report: Report, extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The data of one cluster's report; ``extra`` dimensions (Account, Region) go on every datum."""
    base = [{"Name": "Cluster", "Value": report.cluster}, *_dimensions(extra)]
    at = report.generated_at

    def datum(name: str, value: float, unit: str, *dims: tuple[str, str]) -> dict[str, Any]:
        dimensions = base + [{"Name": k, "Value": v} for k, v in dims]
        return {"MetricName": name, "Dimensions": dimensions, "Timestamp": at, "Value": float(value), "Unit": unit}

    data = [datum("Status", report.status.exit_code, "None")]
    for check in report.stats.checks_run:
        for severity in Severity:
            count = sum(1 for f in report.findings if f.check == check and f.severity == severity)
            data.append(datum("Findings", count, "Count", ("Check", check), ("Severity", severity.value)))
    for check in dict.fromkeys([*report.stats.checks_run, *(e.check for e in report.errors)]):
        count = sum(1 for e in report.errors if e.check == check)
        data.append(datum("CheckErrors", count, "Count", ("Check", check)))
    return data


def fleet_metric_data(fleet: FleetReport) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = []
    for cluster in fleet.clusters:
        extra = {"Account": cluster.account, "Region": cluster.region}
        if cluster.report is not None:
            data += report_metric_data(cluster.report, extra)
        else:  # could not be checked at all: say so, rather than leave a gap an alarm might read as fine
            dims = [{"Name": "Cluster", "Value": cluster.cluster}, *_dimensions(extra)]
            data.append({"MetricName": "Status", "Dimensions": dims, "Timestamp": fleet.generated_at,
                         "Value": float(cluster.status.exit_code), "Unit": "None"})
    return data


def _dimensions(extra: dict[str, str] | None) -> list[dict[str, str]]:
    return [{"Name": k, "Value": v} for k, v in (extra or {}).items()]


def batches(data: Sequence[dict[str, Any]], max_items: int = MAX_METRICS_PER_CALL,
            max_bytes: int = MAX_BYTES_PER_CALL) -> Iterator[list[dict[str, Any]]]:
    """Split into calls that respect both the per-call metric count and the payload size."""
    batch: list[dict[str, Any]] = []
    size = 0
    for datum in data:
        datum_size = len(json.dumps(datum, default=str))
        if batch and (len(batch) == max_items or size + datum_size > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(datum)
        size += datum_size
    if batch:
        yield batch


@dataclass
class CloudWatchExport:
    namespace: str
    region: str | None
    metrics: int
    calls: int = 0
    dry_run: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)  # what was (or, dry run, would be) sent

    def to_json_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "region": self.region, "metrics": self.metrics, "calls": self.calls,
                "dry_run": self.dry_run, "requests": json.loads(json.dumps(self.requests, default=_iso))}


def _iso(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def export_to_cloudwatch(doctor: Doctor, source: Report | FleetReport, namespace: str | None = None,
                         dry_run: bool = False) -> CloudWatchExport:
    """Put the metrics of a check or fleet report; with ``dry_run``, only say what would be put.

    The destination region is the connection's/config's, else a single report's own region.
    """
    namespace = namespace or doctor.settings.export.cloudwatch_namespace
    data = fleet_metric_data(source) if isinstance(source, FleetReport) else report_metric_data(source)
    requests = [{"Namespace": namespace, "MetricData": batch} for batch in batches(data)]
    fallback = source.region if isinstance(source, Report) else None
    region = (doctor.connection.region or doctor.settings.region or os.environ.get("AWS_REGION") or fallback)
    result = CloudWatchExport(namespace, region, len(data), dry_run=dry_run, requests=requests)
    if dry_run or not requests:
        return result
    target = replace(doctor, connection=replace(doctor.connection, region=region))
    aws = target.connect(target.cluster_settings(source.cluster if isinstance(source, Report) else ""))
    result.region = aws.region
    cloudwatch = aws.client("cloudwatch")
    for request in requests:
        try:
            cloudwatch.put_metric_data(**request)
        except Exception as exc:
            failure = describe_aws_failure(exc)
            if failure is None:
                raise
            sent = f"{result.calls} of {len(requests)} PutMetricData calls had succeeded"
            if failure.kind == "credentials":
                raise credentials_error(failure) from None
            raise AwsUnavailable(f"cannot put metrics into {namespace} ({failure.code}): {failure.message}; {sent}",
                                 hint=f"the exporter needs {IAM_ACTION} in {aws.region}") from None
        result.calls += 1
    return result
