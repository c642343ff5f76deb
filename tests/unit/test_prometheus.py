"""The Prometheus exposition is read back by prometheus_client's own parser and checked line by line."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from fmdoctor.engine.model import CheckError, Finding, Report, RunStats, Severity, Status
from fmdoctor.fleet.model import ClusterResult, FleetReport, FleetStats, ScopeResult
from fmdoctor.report import RENDERERS
from fmdoctor.report.prometheus import render_fleet_prometheus, render_prometheus

AT = datetime(2026, 5, 1, 3, 0, tzinfo=UTC)
NASTY = 'llm "prod"\\train\nv2'  # a quote, a backslash and a newline: all three need escaping
SAMPLE_LINE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*")(,[a-zA-Z_][a-zA-Z0-9_]*='
    r'"([^"\\\n]|\\\\|\\"|\\n)*")*\})? -?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?$'
)


def finding(check: str, severity: Severity, resource: str) -> Finding:
    return Finding(check=check, severity=severity, resource=resource, summary="s", evidence={}, runbook=check)


def report(cluster: str = "llm-train") -> Report:
    return Report(
        cluster=cluster,
        region="us-west-2",
        generated_at=AT,
        status=Status.CRITICAL,
        findings=[finding("efa-sg-self-reference", Severity.CRITICAL, "sg-1"),
                  finding("placement-group", Severity.WARNING, "i-1"),
                  finding("placement-group", Severity.WARNING, "i-2")],
        errors=[CheckError(check="efa-subnet-spread", code="AccessDenied", unverified="subnets")],
        stats=RunStats(api_calls={"ec2.DescribeInstances": 1, "ec2.DescribeSubnets": 2}, duration_s=1.25,
                       checks_run=["efa-sg-self-reference", "placement-group", "efa-not-attached"]),
    )


def strict_lines(text: str) -> dict[str, list[str]]:
    """Every line is HELP, TYPE or a sample; each family has one HELP and TYPE, first, and its samples together."""
    families: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in families, f"{name} appears twice"
            families[name] = []
            current = name
        elif line.startswith("# TYPE "):
            assert line == f"# TYPE {current} gauge"
        else:
            assert SAMPLE_LINE.match(line), line
            assert re.match(rf"^{current}[{{ ]", line), f"{line!r} outside its family {current}"
            families[current].append(line)
    return families


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge" and family.documentation
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_check_report_exposition_parses_and_counts_every_check_and_severity():
    text = render_prometheus(report())
    strict_lines(text)
    got = samples(text)
    ids = {"cluster": "llm-train", "region": "us-west-2"}
    assert got[key("fmdoctor_status", **ids)] == 2
    assert got[key("fmdoctor_findings", **ids, check="efa-sg-self-reference", severity="critical")] == 1
    assert got[key("fmdoctor_findings", **ids, check="placement-group", severity="warning")] == 2
    # Zeros for checks that ran clean, so an alert on '> 0' resolves after the fix.
    assert got[key("fmdoctor_findings", **ids, check="efa-not-attached", severity="critical")] == 0
    assert len([k for k in got if k[0] == "fmdoctor_findings"]) == 3 * 3
    assert got[key("fmdoctor_check_errors", **ids, check="efa-subnet-spread")] == 1
    assert got[key("fmdoctor_check_errors", **ids, check="placement-group")] == 0
    # A check that could not run at all has no findings series: absent, never a reassuring zero.
    assert not any(k[0] == "fmdoctor_findings" and ("check", "efa-subnet-spread") in k[1] for k in got)
    assert got[key("fmdoctor_last_run_timestamp_seconds", **ids)] == AT.timestamp()
    assert got[key("fmdoctor_run_api_calls", **ids)] == 3
    assert got[key("fmdoctor_run_duration_seconds", **ids)] == 1.25


def test_label_values_are_escaped():
    text = render_prometheus(report(NASTY))
    strict_lines(text)
    assert 'cluster="llm \\"prod\\"\\\\train\\nv2"' in text
    clusters = {dict(k[1])["cluster"] for k in samples(text)}
    assert clusters == {NASTY}


def test_check_registers_the_format():
    assert RENDERERS["prometheus"] is render_prometheus


def test_fleet_exposition_keeps_each_family_together_and_labels_accounts():
    fleet = FleetReport(
        generated_at=AT,
        status=Status.UNKNOWN,
        accounts=2,
        scopes=[ScopeResult(account="111111111111", region="us-west-2", status=Status.OK, clusters=2),
                ScopeResult(account="222222222222", region="us-west-2", status=Status.UNKNOWN,
                            error=CheckError(check="assume-role", code="AccessDenied", unverified="all"))],
        clusters=[
            ClusterResult(account="111111111111", region="us-west-2", cluster="a", status=Status.CRITICAL,
                          report=report("a")),
            ClusterResult(account="111111111111", region="us-west-2", cluster="b", status=Status.UNKNOWN,
                          error=CheckError(check="cluster", code="TargetNotFound", unverified="all")),
        ],
        stats=FleetStats(api_calls_total=42, duration_s=3.5),
    )
    text = render_fleet_prometheus(fleet)
    families = strict_lines(text)
    assert len(families["fmdoctor_status"]) == 2
    got = samples(text)
    assert got[key("fmdoctor_fleet_status")] == 3
    assert got[key("fmdoctor_fleet_scope_up", account="222222222222", region="us-west-2")] == 0
    assert got[key("fmdoctor_fleet_scope_up", account="111111111111", region="us-west-2")] == 1
    assert got[key("fmdoctor_fleet_clusters", status="critical")] == 1
    assert got[key("fmdoctor_fleet_clusters", status="ok")] == 0
    a = {"account": "111111111111", "region": "us-west-2", "cluster": "a"}
    assert got[key("fmdoctor_findings", **a, check="efa-sg-self-reference", severity="critical")] == 1
    b = {"account": "111111111111", "region": "us-west-2", "cluster": "b"}
    assert got[key("fmdoctor_status", **b)] == 3 and got[key("fmdoctor_check_errors", **b, check="cluster")] == 1
