"""CloudWatch export: the data, batching to the PutMetricData limits, the calls made, and a denied put."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from fmdoctor.cli.export_cmd import read_report
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.errors import AwsUnavailable, UsageError
from fmdoctor.engine.model import CheckError, Finding, Report, RunStats, Severity, Status
from fmdoctor.export.cloudwatch import MAX_METRICS_PER_CALL, batches, export_to_cloudwatch, report_metric_data
from fmdoctor.fleet.model import ClusterResult, FleetReport, ScopeResult

AT = datetime.now(UTC).replace(microsecond=0)
CHECKS = ["efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached", "efa-missing-interfaces",
          "placement-group"]
PER_CLUSTER = 1 + 3 * len(CHECKS) + len(CHECKS)  # Status, Findings x severities, CheckErrors


def report(cluster: str = "llm-train") -> Report:
    return Report(
        cluster=cluster, region="us-west-2", generated_at=AT, status=Status.CRITICAL,
        findings=[Finding(check="efa-sg-self-reference", severity=Severity.CRITICAL, resource="sg-1", summary="s",
                          runbook="efa-sg-self-reference")],
        errors=[CheckError(check="placement-group", code="Throttling", unverified="groups")],
        stats=RunStats(checks_run=CHECKS),
    )


def fleet(clusters: int) -> FleetReport:
    results = [ClusterResult(account=f"{i % 50:012d}", region="us-west-2", cluster=f"c{i}", status=Status.CRITICAL,
                             report=report(f"c{i}")) for i in range(clusters)]
    results.append(ClusterResult(account="000000000001", region="eu-west-1", cluster="gone", status=Status.UNKNOWN,
                                 error=CheckError(check="cluster", code="TargetNotFound", unverified="all")))
    return FleetReport(generated_at=AT, status=Status.UNKNOWN, scopes=[
        ScopeResult(account="000000000001", region="us-west-2", status=Status.OK)], clusters=results)


def dims(datum):
    return {d["Name"]: d["Value"] for d in datum["Dimensions"]}


def test_one_report_gives_status_findings_per_severity_and_errors():
    data = report_metric_data(report())
    assert len(data) == PER_CLUSTER
    by = {(d["MetricName"], *sorted(dims(d).items())): d["Value"] for d in data}
    assert by[("Status", ("Cluster", "llm-train"))] == 2
    critical = ("Findings", ("Check", "efa-sg-self-reference"), ("Cluster", "llm-train"), ("Severity", "critical"))
    assert by[critical] == 1
    assert by[("Findings", ("Check", "placement-group"), ("Cluster", "llm-train"), ("Severity", "warning"))] == 0
    assert by[("CheckErrors", ("Check", "placement-group"), ("Cluster", "llm-train"))] == 1
    assert {d["Timestamp"] for d in data} == {AT}


def test_batches_respect_count_and_size():
    data = [{"MetricName": f"m{i:04d}", "Value": 1.0} for i in range(2500)]
    assert [len(b) for b in batches(data)] == [1000, 1000, 500]
    by_size = list(batches(data, max_bytes=10 * len(json.dumps(data[0]))))
    assert {len(b) for b in by_size} == {10} and len(by_size) == 250
    assert [d for b in by_size for d in b] == data  # nothing lost, order kept


def cloudwatch_doctor(opened: list) -> Doctor:
    from fmdoctor.engine.api import new_aws

    def factory(options):
        aws = new_aws(options)
        opened.append(aws)
        return aws

    return Doctor(settings=Settings(), connection=Connection(region="us-west-2"), aws_factory=factory)


def test_fleet_export_is_batched_to_the_api_limit(aws):
    opened: list = []
    source = fleet(50)  # 50 x 21 data + 1 Status for the cluster that could not be checked: 1,051
    result = export_to_cloudwatch(cloudwatch_doctor(opened), source, namespace="fmdoctor-test")
    expected = 50 * PER_CLUSTER + 1
    assert (result.metrics, result.calls) == (expected, -(-expected // MAX_METRICS_PER_CALL))
    assert opened[0].calls.snapshot() == {"cloudwatch.PutMetricData": 2}
    listed = aws.client("cloudwatch").get_paginator("list_metrics").paginate(Namespace="fmdoctor-test")
    metrics = [m for page in listed for m in page["Metrics"]]
    assert len(metrics) == expected
    gone = [m for m in metrics if {"Name": "Cluster", "Value": "gone"} in m["Dimensions"]]
    assert [m["MetricName"] for m in gone] == ["Status"]
    assert {d["Name"] for d in gone[0]["Dimensions"]} == {"Cluster", "Account", "Region"}


def test_dry_run_sends_nothing(aws):
    opened: list = []
    result = export_to_cloudwatch(cloudwatch_doctor(opened), report(), dry_run=True)
    assert opened == [] and result.calls == 0 and result.metrics == PER_CLUSTER
    sent = result.to_json_dict()["requests"]
    assert sent[0]["Namespace"] == "fmdoctor" and sent[0]["MetricData"][0]["Timestamp"] == AT.isoformat()


def test_denied_put_names_the_permission(aws, faults):
    faults.deny("cloudwatch", "PutMetricData")
    doctor = Doctor(settings=Settings(), connection=Connection(region="us-west-2"), aws_factory=faults.aws_factory)
    with pytest.raises(AwsUnavailable) as raised:
        export_to_cloudwatch(doctor, report())
    assert "AccessDenied" in raised.value.message and "0 of 1 PutMetricData" in raised.value.message
    assert raised.value.hint == "the exporter needs cloudwatch:PutMetricData in us-west-2"


def test_saved_reports_are_read_back(tmp_path):
    check_json = tmp_path / "check.json"
    check_json.write_text(json.dumps(report().to_json_dict()))
    fleet_json = tmp_path / "fleet.json"
    fleet_json.write_text(json.dumps(fleet(2).to_json_dict()))
    assert read_report(str(check_json)) == report()
    loaded = read_report(str(fleet_json))
    assert isinstance(loaded, FleetReport) and [c.cluster for c in loaded.clusters] == ["c0", "c1", "gone"]
    (tmp_path / "bad.json").write_text('{"cluster": 1}')
    with pytest.raises(UsageError, match="not an fmdoctor check or fleet JSON report"):
        read_report(str(tmp_path / "bad.json"))
