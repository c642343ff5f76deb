"""Renderers of a :class:`~fmdoctor.fleet.model.FleetReport`: one summary table, worst clusters first."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fmdoctor.engine.model import CheckError, Status
from fmdoctor.fleet.model import ClusterResult, FleetReport
from fmdoctor.report.markdown import _cell, code_span
from fmdoctor.report.prometheus import render_fleet_prometheus
from fmdoctor.report.text import STATUS_STYLE, make_console
from fmdoctor.safety.text import dumps_json, visible
from fmdoctor.words import plural

_RANK = {Status.UNKNOWN: 0, Status.CRITICAL: 1, Status.WARNING: 2, Status.OK: 3}


def worst_first(fleet: FleetReport) -> list[ClusterResult]:
    return sorted(fleet.clusters, key=lambda c: (_RANK[c.status], c.account, c.region, c.cluster))


def _headline(fleet: FleetReport) -> str:
    counts = fleet.summary()["clusters_by_status"]
    parts = [f"{n} {s}" for s, n in counts.items() if n]
    failed = len(fleet.failed_scopes())
    if failed:
        parts.append(f"{failed} of {len(fleet.scopes)} scopes not scanned")
    return (f"{', '.join(parts) or 'no clusters found'} · {plural(fleet.accounts, 'account')} · "
            f"{plural(len(fleet.scopes), 'scope')} · {plural(fleet.stats.api_calls_total, 'API call')} · "
            f"{fleet.stats.duration_s:.1f}s")


def _error_line(error: CheckError) -> str:
    action = f" (needs {error.iam_action})" if error.iam_action else ""
    return f"{error.code}{action}: {error.message}"


def write_fleet_text(fleet: FleetReport, console: Console) -> None:
    title = Text("fmdoctor fleet check ", style="bold")
    title.append(fleet.status.value.upper(), style=STATUS_STYLE[fleet.status])
    console.print(title)
    console.print(_headline(fleet), style="dim")
    if fleet.clusters:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=False)
        for name, kwargs in (("CLUSTER", {"overflow": "fold"}), ("ACCOUNT", {"no_wrap": True}),
                             ("REGION", {"no_wrap": True}), ("STATUS", {"no_wrap": True}),
                             ("WORST FINDINGS", {"overflow": "fold", "ratio": 1})):
            table.add_column(name, **kwargs)  # type: ignore[arg-type]
        for c in worst_first(fleet):
            # Text, not str: a str cell is read as rich markup, and a cluster is named by whoever tags it
            table.add_row(Text(visible(c.cluster, lines=False)), Text(c.account), Text(c.region),
                          Text(c.status.value, style=STATUS_STYLE[c.status]), Text(visible(c.worst_findings(), False)))
        console.print()
        console.print(table)
    failed = fleet.failed_scopes()
    if failed:
        console.print()
        console.print("COULD NOT SCAN", style="bold magenta")
        for scope in failed:
            assert scope.error is not None
            console.print(Text(f"  ? {scope.account} {scope.region}: {_error_line(scope.error)}"), overflow="fold")
    if not fleet.clusters and not failed:
        console.print()
        console.print("No clusters found: check --regions, the accounts and the tag_keys setting.", style="magenta")


def render_fleet_text(fleet: FleetReport, color: bool = False) -> str:
    buffer = io.StringIO()
    write_fleet_text(fleet, make_console(buffer, color=color))
    return buffer.getvalue()


def render_fleet_json(fleet: FleetReport) -> str:
    return dumps_json(fleet.to_json_dict(), indent=2)


def render_fleet_markdown(fleet: FleetReport) -> str:
    out = [f"# fmdoctor fleet: **{fleet.status.value.upper()}**", "",
           f"Generated {fleet.generated_at.isoformat()} · {_headline(fleet)}", ""]
    if fleet.clusters:
        out += ["| Cluster | Account | Region | Status | Worst findings |", "|---|---|---|---|---|"]
        out += [f"| {code_span(c.cluster)} | {c.account} | {c.region} | {c.status.value} | "
                f"{_cell(c.worst_findings())} |" for c in worst_first(fleet)]
        out.append("")
    failed = fleet.failed_scopes()
    if failed:
        out += ["## Could not scan", ""]
        out += [f"- {s.account} {s.region}: {_cell(_error_line(s.error))}" for s in failed if s.error]
        out.append("")
    details = [c for c in worst_first(fleet) if c.report and c.report.findings]
    for c in details:
        assert c.report is not None
        out += [f"## {code_span(c.cluster)} ({c.account} {c.region}): {c.status.value}", ""]
        out += [f"- {f.severity.value} {code_span(f.check)} on {code_span(f.resource)}: {_cell(f.summary)}"
                for f in c.report.findings]
        out.append("")
    return "\n".join(out)


FLEET_RENDERERS: dict[str, Callable[[FleetReport], str]] = {
    "text": render_fleet_text,
    "json": render_fleet_json,
    "markdown": render_fleet_markdown,
    "prometheus": render_fleet_prometheus,
}
