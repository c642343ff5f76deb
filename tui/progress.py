"""Progress of a check run: a bar for the run and a mark per check (running, findings, error)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static


class ChecksProgress(Vertical):
    """Shows while checks run; afterwards one summary line. Driven by CheckUpdate messages, never by timers."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.states: dict[str, str] = {}
        self.running = False

    def compose(self) -> ComposeResult:
        yield ProgressBar(total=None, show_eta=False, id="progress-bar")
        yield Static("", id="progress-checks", markup=False)

    def start(self, cluster: str) -> None:
        self.states.clear()
        self.running = True
        self.add_class("-running")
        bar = self.query_one(ProgressBar)
        bar.update(total=None, progress=0)
        self._text(f"connecting to {cluster}…")

    def update_check(self, check_id: str, phase: str, findings: int, errors: int, done: int, total: int) -> None:
        if phase == "started":
            self.states[check_id] = "⋯"
        else:
            self.states[check_id] = "✗" if errors else (f"{findings}" if findings else "✓")
        if total:
            self.query_one(ProgressBar).update(total=total, progress=done)
        self._text("  ".join(f"{mark} {check}" for check, mark in self.states.items()))

    def finish(self, summary: str) -> None:
        self.running = False
        self.remove_class("-running")
        self._text(summary)

    def _text(self, text: str) -> None:
        self.query_one("#progress-checks", Static).update(text)
