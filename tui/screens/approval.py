"""Approve or reject a fix: the exact API calls (scrolled when long) and the dry run beside the buttons, which stay
on screen at 80x24; nothing changes unless Approve is pressed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Markdown, Static

from fmdoctor.tui.fixes import ProposedFix


class ApprovalScreen(ModalScreen[bool]):
    """Dismisses True only on the Approve button (or 'y'); Esc, 'n' and Reject all decline."""

    BINDINGS = [Binding("escape,n", "reject", "Reject"), Binding("y", "approve", "Approve")]

    def __init__(self, fix: ProposedFix) -> None:
        super().__init__()
        self.fix = fix

    def compose(self) -> ComposeResult:
        with Vertical(id="approval", classes="dialog"):
            yield Static(f"Apply this fix to {self.fix.target}?", classes="dialog-title", markup=False)
            with VerticalScroll(classes="dialog-body"):  # a long plan scrolls; the dry run and buttons stay put
                yield Markdown(self.fix.markdown(), id="plan", open_links=False)
            yield Static(self.fix.dry_run_text(), id="dry-run", markup=False,
                         classes="-ok" if self.fix.dry_run_ok else "-fails")
            yield Static("Nothing changes unless you approve. Every step goes to the audit log.", classes="hint")
            with Horizontal(classes="buttons"):
                yield Button("Approve (y)", variant="success" if self.fix.dry_run_ok else "warning", id="approve")
                yield Button("Reject (n)", variant="error", id="reject")

    def on_mount(self) -> None:
        self.query_one("#reject", Button).focus()  # the safe choice is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "approve")

    def action_approve(self) -> None:
        self.dismiss(True)

    def action_reject(self) -> None:
        self.dismiss(False)
