"""Switch cluster: one of the configured clusters, or any name typed in."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option


class ClusterScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, clusters: list[str], current: str) -> None:
        super().__init__()
        self.clusters, self.current = clusters, current

    def compose(self) -> ComposeResult:
        with Vertical(id="clusters", classes="dialog"):
            yield Static("Switch cluster", classes="dialog-title")
            yield OptionList(*[Option(f"{'● ' if c == self.current else '  '}{c}", id=c) for c in self.clusters],
                             id="cluster-list")
            yield Input(placeholder="or type a cluster name and press Enter", id="cluster-name")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        name = event.value.strip()
        self.dismiss(name or None)

    def action_close(self) -> None:
        self.dismiss(None)
