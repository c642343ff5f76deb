"""Prometheus text exposition (format 0.0.4) of fmdoctor's verdicts, for Alertmanager and dashboards.

Every check that ran gets one ``fmdoctor_findings`` series per severity, zeros included, so an alert
such as ``fmdoctor_findings{severity="critical"} > 0`` resolves when the problem is fixed instead of
going stale. No sample carries a timestamp (node_exporter's textfile collector refuses them);
``fmdoctor_last_run_timestamp_seconds`` says how fresh the verdict is. Use it with the textfile
collector (``fmdoctor check --format prometheus > /var/lib/node_exporter/textfile/fmdoctor.prom``) or a
Pushgateway.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from fmdoctor.engine.model import Report, Severity, Status

if TYPE_CHECKING:
    from fmdoctor.fleet.model import FleetReport

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

HELP = {
    "fmdoctor_status": "Verdict of the last run per cluster: 0 ok, 1 warning, 2 critical, 3 unknown (the exit code).",
    "fmdoctor_findings": "Findings of the last run by check and severity; 0 when the check ran and found none.",
    "fmdoctor_check_errors": "Parts of a check that could not be verified in the last run (denied, throttled, ...).",
    "fmdoctor_last_run_timestamp_seconds": "When the last run started, in seconds since the epoch.",
    "fmdoctor_run_duration_seconds": "How long the last run took.",
    "fmdoctor_run_api_calls": "AWS API calls the last run made.",
    "fmdoctor_fleet_status": "Worst verdict over the fleet: 0 ok, 1 warning, 2 critical, 3 unknown.",
    "fmdoctor_fleet_scope_up": "1 when the account/region could be scanned, 0 when it could not (role, region).",
    "fmdoctor_fleet_clusters": "Clusters of the last fleet scan by verdict.",
    "fmdoctor_fleet_last_run_timestamp_seconds": "When the last fleet scan started, in seconds since the epoch.",
    "fmdoctor_fleet_duration_seconds": "How long the last fleet scan took.",
    "fmdoctor_fleet_api_calls": "AWS API calls the last fleet scan made.",
    "fmdoctor_serve_events_total": "Events fmdoctor serve took, by outcome (delivered, duplicate, malformed, ...).",
    "fmdoctor_serve_deliveries_total": "Results sent by fmdoctor serve, by output and result.",
    "fmdoctor_serve_in_flight": "Events being investigated right now.",
    "fmdoctor_serve_in_flight_max": "Most events investigated at once since start (bounded by serve.concurrency).",
}
COUNTERS = {"fmdoctor_serve_events_total", "fmdoctor_serve_deliveries_total"}  # every other family is a gauge


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 2**53):
        return str(int(value))
    return repr(float(value))


class Exposition:
    """Samples grouped by metric family (the format wants each family's samples together), then rendered."""

    def __init__(self) -> None:
        self._families: dict[str, list[tuple[dict[str, str], float]]] = {}

    def add(self, name: str, labels: dict[str, str], value: float) -> None:
        if name not in HELP or not METRIC_NAME.match(name):
            raise ValueError(f"unknown metric {name!r}")
        bad = [k for k in labels if not LABEL_NAME.match(k) or k.startswith("__")]
        if bad:
            raise ValueError(f"invalid label names {bad}")
        self._families.setdefault(name, []).append((labels, value))

    def render(self) -> str:
        out: list[str] = []
        for name, samples in self._families.items():
            out.append(f"# HELP {name} {_escape_help(HELP[name])}")
            out.append(f"# TYPE {name} {'counter' if name in COUNTERS else 'gauge'}")
            for labels, value in samples:
                pairs = ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in labels.items())
                out.append(f"{name}{{{pairs}}} {_format_value(value)}" if pairs else f"{name} {_format_value(value)}")
        return "\n".join(out) + ("\n" if out else "")


def add_report(exposition: Exposition, report: Report, labels: dict[str, str]) -> None:
    """One cluster's series; ``labels`` identify it (cluster, region and, in a fleet, account)."""
    exposition.add("fmdoctor_status", labels, report.status.exit_code)
    for check in report.stats.checks_run:
        for severity in Severity:
            count = sum(1 for f in report.findings if f.check == check and f.severity == severity)
            exposition.add("fmdoctor_findings", {**labels, "check": check, "severity": severity.value}, count)
    for check in dict.fromkeys([*report.stats.checks_run, *(e.check for e in report.errors)]):
        count = sum(1 for e in report.errors if e.check == check)
        exposition.add("fmdoctor_check_errors", {**labels, "check": check}, count)
    exposition.add("fmdoctor_last_run_timestamp_seconds", labels, round(report.generated_at.timestamp(), 3))
    exposition.add("fmdoctor_run_duration_seconds", labels, report.stats.duration_s)
    exposition.add("fmdoctor_run_api_calls", labels, sum(report.stats.api_calls.values()))


def render_prometheus(report: Report) -> str:
    exposition = Exposition()
    add_report(exposition, report, {"cluster": report.cluster, "region": report.region})
    return exposition.render().rstrip("\n")


def render_fleet_prometheus(fleet: FleetReport) -> str:
    exposition = Exposition()
    exposition.add("fmdoctor_fleet_status", {}, fleet.status.exit_code)
    for status in Status:
        exposition.add("fmdoctor_fleet_clusters", {"status": status.value},
                       sum(1 for c in fleet.clusters if c.status == status))
    for scope in fleet.scopes:
        exposition.add("fmdoctor_fleet_scope_up", {"account": scope.account, "region": scope.region},
                       0 if scope.error else 1)
    exposition.add("fmdoctor_fleet_last_run_timestamp_seconds", {}, round(fleet.generated_at.timestamp(), 3))
    exposition.add("fmdoctor_fleet_duration_seconds", {}, fleet.stats.duration_s)
    exposition.add("fmdoctor_fleet_api_calls", {}, fleet.stats.api_calls_total)
    for cluster in fleet.clusters:
        labels = {"account": cluster.account, "region": cluster.region, "cluster": cluster.cluster}
        if cluster.report is not None:
            add_report(exposition, cluster.report, labels)
        else:
            exposition.add("fmdoctor_status", labels, cluster.status.exit_code)
            exposition.add("fmdoctor_check_errors", {**labels, "check": "cluster"}, 1 if cluster.error else 0)
    return exposition.render().rstrip("\n")
