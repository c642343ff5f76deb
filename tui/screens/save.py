"""Save the transcript: asks for a path (a sensible default filled in)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class SaveScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="save", classes="dialog"):
            yield Static("Save the transcript as Markdown", classes="dialog-title")
            yield Input(value=self.default, id="save-path")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)

    def action_close(self) -> None:
        self.dismiss(None)
