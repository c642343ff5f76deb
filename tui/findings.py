"""The findings panel: a live table of the selected cluster's findings, sortable and filterable. By default in
incident order (:mod:`fmdoctor.engine.incidents`): the most urgent incident first, its cause first, as every
report leads."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Input, Static

from fmdoctor.engine.incidents import Incident, build_incidents
from fmdoctor.engine.model import Finding, Report
from fmdoctor.safety.text import visible
from fmdoctor.tui.messages import FindingChosen
from fmdoctor.tui.progress import ChecksProgress

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
COLUMNS = (("severity", "Sev"), ("check", "Check"), ("resource", "Resource"), ("summary", "Summary"))
URGENCY = "urgency"  # incident order: not a column, the default
SORT_KEYS = (URGENCY, *(key for key, _ in COLUMNS))
SEVERITY_WIDTH, MIN_WIDTH = 8, 10


def column_widths(width: int, findings: Iterable[Finding]) -> dict[str, int]:
    """Content widths for a table ``width`` cells wide (each column pads a cell on each side, the scrollbar
    takes two): of what severity leaves, check gets up to a quarter and resource (ids people copy) up to a
    third, the summary the rest."""
    findings = list(findings)
    room = max(width - 2 * len(COLUMNS) - 2 - SEVERITY_WIDTH, 3 * MIN_WIDTH)
    longest = {key: max((len(getattr(f, key)) for f in findings), default=MIN_WIDTH) for key in ("check", "resource")}
    check = min(longest["check"], max(MIN_WIDTH, room // 4))
    resource = min(longest["resource"], max(MIN_WIDTH, room // 3))
    return {"severity": SEVERITY_WIDTH, "check": check, "resource": resource,
            "summary": max(MIN_WIDTH, room - check - resource)}


def shorten(text: str, width: int, middle: bool = False) -> str:
    """``text`` in ``width`` cells with an ellipsis where it was cut: at the end, or in the middle for ids and
    check names, whose ends tell them apart (``spot-…otected`` from ``spot-…ruption``)."""
    if len(text) <= width:
        return text
    if not middle:
        return text[: width - 1] + "…"
    head = width // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def matches(finding: Finding, query: str) -> bool:
    """Every word of the query appears in the severity, check, resource or summary (case-insensitive)."""
    haystack = " ".join((finding.severity.value, finding.check, finding.resource, finding.summary)).lower()
    return all(word in haystack for word in query.lower().split())


def sort_findings(findings: Iterable[Finding], key: str = "severity", reverse: bool = False,
                  incidents: list[Incident] | None = None) -> list[Finding]:
    """Urgency sorts in incident order (most urgent incident first, its cause first; ``incidents`` are the
    report's, else built from ``findings``); severity worst first; other columns alphabetically, ties by
    severity then check."""
    findings = list(findings)
    if key == URGENCY:
        order = {(ref.check, ref.resource): n for n, ref in
                 enumerate(r for i in (incidents if incidents is not None else build_incidents(findings))
                           for r in i.findings)}
        return sorted(findings, key=lambda f: order.get((f.check, f.resource), len(order)), reverse=reverse)

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
        self.sort_key, self.sort_reverse = URGENCY, False
        self.incidents: list[Incident] = []
        self.shown: list[Finding] = []
        self.widths: dict[str, int] = {}

    def compose(self) -> ComposeResult:
        yield Static("Findings", id="findings-title")
        yield Input(placeholder="filter findings (words in severity, check, resource, summary)", id="filter")
        yield ChecksProgress(id="progress")
        yield Static("", id="last-error", markup=False)
        yield DataTable(id="findings-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.refresh_rows()

    def on_resize(self) -> None:
        if column_widths(self.table.size.width, self.report.findings if self.report else []) != self.widths:
            self.refresh_rows()

    def show_error(self, text: str | None, severity: str = "error") -> None:
        """The last thing that failed (or could not be verified), kept in view until the next run starts: a
        notification goes away after a while."""
        error = self.query_one("#last-error", Static)
        error.update(text or "")
        error.set_class(bool(text), "-shown")
        error.set_class(severity == "warning", "-warning")

    @property
    def table(self) -> DataTable:
        return self.query_one("#findings-table", DataTable)

    def show_report(self, report: Report | None) -> None:
        self.report = report
        self.incidents = report.incidents() if report else []
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
                                   self.sort_reverse, self.incidents)
        table = self.table
        widths = column_widths(table.size.width, findings)
        if widths != self.widths or not table.columns:
            table.clear(columns=True)
            for key, label in COLUMNS:
                table.add_column(label, width=widths[key], key=key)
            self.widths = widths
        else:
            table.clear()
        for finding in self.shown:
            style = SEVERITY_STYLE.get(finding.severity.value, "")
            # Text, not str: a str cell is read as markup, and findings carry text from AWS (shown, never obeyed)
            table.add_row(Text(finding.severity.value, style=style),
                          Text(shorten(finding.check, widths["check"], middle=True)),
                          Text(shorten(visible(finding.resource, lines=False), widths["resource"], middle=True)),
                          Text(shorten(visible(finding.summary, lines=False), widths["summary"])), key=finding.id)
        self._title()

    def _title(self) -> None:
        total = len(self.report.findings) if self.report else 0
        shown = f"{len(self.shown)} of {total}" if self.query_text else str(total)
        arrow = "↓" if not self.sort_reverse else "↑"
        where = f" · {visible(self.report.cluster, lines=False)}" if self.report else ""
        grouped = f" in {len(self.incidents)} incidents" if len(self.incidents) > 1 else ""
        title = f"Findings{where}: {shown}{grouped} · sorted by {self.sort_key} {arrow}"
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
