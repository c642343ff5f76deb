"""Keys and what each does."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("i", "type a question (Enter sends it)"),
    ("r", "re-run the checks"),
    ("/", "filter findings by words in any column"),
    ("s", "sort by the next column (or click a header)"),
    ("enter", "the selected finding: evidence and runbook"),
    ("f", "fix the selected finding: plan, dry run, approve or reject"),
    ("c", "switch cluster"),
    ("ctrl+s", "save the transcript as Markdown"),
    ("esc", "back to the table; on the table, cancel what is running"),
    ("ctrl+p", "command palette: every action"),
    ("?", "this help"),
    ("q", "quit"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help", classes="dialog"):
            yield Static("fmdoctor keys", classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static("\n".join(f"[b]{key:>7}[/b]  {what}" for key, what in KEYS))
            yield Static("Nothing changes your account unless you press Approve on a plan.", classes="hint")

    def action_close(self) -> None:
        self.dismiss(None)
