"""A finding's evidence and its runbook, filled in with the finding's real ids."""

from __future__ import annotations

import json
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Markdown, Static

from fmdoctor.engine.model import Finding
from fmdoctor.report.markdown import code_span
from fmdoctor.runbooks import get_runbook
from fmdoctor.safety.text import visible
from fmdoctor.tui.errors import explain
from fmdoctor.tui.fixes import has_fix


def runbook_for(finding: Finding, settings: Any, cluster: str, region: str | None,
                demo: bool = False) -> tuple[str | None, str | None]:
    """(the finding's runbook filled in with its evidence, None), or (None, why there is none); ``demo``: the
    finding is the demo's (its fix commands carry --demo)."""
    try:
        runbook = get_runbook(finding.runbook, settings)
        return runbook.render({**finding.model_dump(mode="json"), "id": finding.id}, cluster=cluster,
                              region=region, demo=demo), None
    except Exception as exc:  # an unknown or broken runbook: say so in the screen, never crash
        return None, explain(exc)[0]


def finding_markdown(finding: Finding, runbook: str | None, runbook_error: str | None = None) -> str:
    evidence = {k: v for k, v in finding.evidence.items() if k != "fix"}
    lines = [f"**{finding.severity.value}** {code_span(finding.id)}", "", visible(finding.summary, lines=False), "",
             "**Evidence**", ""]
    lines += [f"- {visible(key, lines=False)}: {code_span(json.dumps(value, default=str))}"
              for key, value in sorted(evidence.items())] + [""]
    if runbook:
        lines += ["---", "", runbook]
    elif runbook_error:
        lines += [f"*No runbook: {runbook_error}*"]
    return "\n".join(lines)


class FindingScreen(ModalScreen[str | None]):
    """Dismisses 'fix' when the person asks to fix this finding, else None."""

    BINDINGS = [Binding("escape,q", "close", "Close"), Binding("f", "fix", "Fix")]

    def __init__(self, finding: Finding, runbook: str | None, runbook_error: str | None = None) -> None:
        super().__init__()
        self.finding, self.runbook, self.runbook_error = finding, runbook, runbook_error

    def compose(self) -> ComposeResult:
        with Vertical(id="finding", classes="dialog"):
            yield Static(visible(f"{self.finding.check} on {self.finding.resource}", lines=False),
                         classes="dialog-title", markup=False)
            with VerticalScroll(classes="dialog-body"):
                yield Markdown(finding_markdown(self.finding, self.runbook, self.runbook_error), id="runbook")
            with Horizontal(classes="buttons"):
                if has_fix(self.finding):  # offered only where fmdoctor has calls to propose
                    yield Button("Fix… (f)", variant="primary", id="fix")
                yield Button("Close (esc)", id="close")

    def on_mount(self) -> None:
        self.query_one(".dialog-body", VerticalScroll).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss("fix" if event.button.id == "fix" else None)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_fix(self) -> None:
        if has_fix(self.finding):
            self.dismiss("fix")
