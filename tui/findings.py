"""The findings panel: a live table of the selected cluster's findings, sortable and filterable."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Input, Static

from fmdoctor.engine.model import Finding, Report
from fmdoctor.safety.text import visible
from fmdoctor.tui.messages import FindingChosen
from fmdoctor.tui.progress import ChecksProgress

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
COLUMNS = (("severity", "Sev"), ("check", "Check"), ("resource", "Resource"), ("summary", "Summary"))
SORT_KEYS = tuple(key for key, _ in COLUMNS)


def matches(finding: Finding, query: str) -> bool:
    """Every word of the query appears in the severity, check, resource or summary (case-insensitive)."""
    haystack = " ".join((finding.severity.value, finding.check, finding.resource, finding.summary)).lower()
    return all(word in haystack for word in query.lower().split())


def sort_findings(findings: Iterable[Finding], key: str = "severity", reverse: bool = False) -> list[Finding]:
    """Severity sorts worst first; other columns alphabetically, ties by severity then check."""
    def by(finding: Finding) -> tuple:
        if key == "severity":
            return (-finding.severity.rank, finding.check, finding.resource)
        return (getattr(finding, key), -finding.severity.rank, finding.check)
    return sorted(findings, key=by, reverse=reverse)


class FindingsPanel(Vertical):
    BINDINGS = [Binding("s", "cycle_sort", "Sort"), Binding("enter", "choose", "Details", show=False)]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.report: Report | None = None
        self.query_text = ""
        self.sort_key, self.sort_reverse = "severity", False
        self.shown: list[Finding] = []

    def compose(self) -> ComposeResult:
        yield Static("Findings", id="findings-title")
        yield Input(placeholder="filter findings (words in severity, check, resource, summary)", id="filter")
        yield ChecksProgress(id="progress")
        table: DataTable = DataTable(id="findings-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table

    @property
    def table(self) -> DataTable:
        return self.query_one("#findings-table", DataTable)

    def show_report(self, report: Report | None) -> None:
        self.report = report
        self.refresh_rows()

    def set_filter(self, query: str) -> None:
        self.query_text = query
        self.refresh_rows()

    def sort_by(self, key: str, reverse: bool | None = None) -> None:
        if reverse is None:
            reverse = not self.sort_reverse if key == self.sort_key else False
        self.sort_key, self.sort_reverse = key, reverse
        self.refresh_rows()

    def refresh_rows(self) -> None:
        findings = self.report.findings if self.report else []
        self.shown = sort_findings([f for f in findings if matches(f, self.query_text)], self.sort_key,
                                   self.sort_reverse)
        table = self.table
        table.clear()
        for finding in self.shown:
            style = SEVERITY_STYLE.get(finding.severity.value, "")
            # Text, not str: a str cell is read as markup, and findings carry text from AWS (shown, never obeyed)
            table.add_row(Text(finding.severity.value, style=style), Text(finding.check),
                          Text(visible(finding.resource, lines=False)), Text(visible(finding.summary, lines=False)),
                          key=finding.id)
        self._title()

    def _title(self) -> None:
        total = len(self.report.findings) if self.report else 0
        shown = f"{len(self.shown)} of {total}" if self.query_text else str(total)
        arrow = "↓" if not self.sort_reverse else "↑"
        where = f" · {visible(self.report.cluster, lines=False)}" if self.report else ""
        title = f"Findings{where}: {shown} · sorted by {self.sort_key} {arrow}"
        if self.query_text:
            title += f" · filter: {self.query_text}"
        self.query_one("#findings-title", Static).update(Text(title))

    @property
    def selected(self) -> Finding | None:
        table = self.table
        if not self.shown or table.cursor_row is None or not 0 <= table.cursor_row < len(self.shown):
            return None
        return self.shown[table.cursor_row]

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            event.stop()
            self.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.stop()
            self.table.focus()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_choose()

    def action_cycle_sort(self) -> None:
        self.sort_by(SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)], reverse=False)

    def action_choose(self) -> None:
        finding = self.selected
        if finding is not None:
            self.post_message(FindingChosen(finding))
