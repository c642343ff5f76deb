"""The TUI's blocking work (boto3, the model) in thread workers; results reach the UI only as messages.

Each job takes a ``threading.Event`` the UI can set (Esc): the engine and the assistant stop their checks
and calls at the next step and still report what they have.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from textual import work

from fmdoctor.engine.model import Finding
from fmdoctor.tui import fixes
from fmdoctor.tui.errors import explain
from fmdoctor.tui.messages import (
    AssistantUpdate,
    ChecksDone,
    ChecksStarted,
    CheckUpdate,
    FixProposed,
    FixReport,
    TurnEnded,
    WorkFailed,
)

SESSION = "tui"


class Jobs:
    """Mixed into the app: it provides doctor, cluster, only, audit, verify_delays and assistant_for()."""

    doctor: Any
    cluster: str
    only: list[str] | None
    audit: Any
    verify_delays: Any
    check_cancel: threading.Event
    turn_cancel: threading.Event

    def _failed(self, what: str, exc: BaseException) -> None:
        message, hint = explain(exc)
        self.post_message(WorkFailed(what, message, hint))  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="checks")
    def run_checks(self) -> None:
        self.check_cancel.set()  # a run still going (r pressed again, cluster switched) stops at its next step
        cancel = self.check_cancel = threading.Event()  # also names this run in its messages
        cluster = self.cluster
        post = self.post_message  # type: ignore[attr-defined]
        post(ChecksStarted(cluster, cancel))

        def progress(event: Any) -> None:
            post(CheckUpdate(event.check_id, event.phase, event.findings, event.errors, event.done, event.total))

        try:
            report = self.doctor.check(cluster, only=self.only, progress=progress, cancel=cancel)
        except Exception as exc:
            self._failed("checks", exc)
            post(ChecksDone(None, cancel.is_set(), cancel))
            return
        post(ChecksDone(report, cancel.is_set(), cancel))

    @work(thread=True, exclusive=True, group="assistant")
    def ask(self, question: str) -> None:
        self._turn("assistant", lambda assistant, cancel: assistant.stream(question, SESSION, cancel))

    @work(thread=True, exclusive=True, group="assistant")
    def resume(self, approval: Any | None) -> None:
        """Continue the assistant's turn: an Approval for its plan applies it, None declines."""
        self._turn("fix", lambda assistant, cancel: assistant.resume_stream(SESSION, approval, cancel))

    def _turn(self, what: str, events: Callable[[Any, threading.Event], Iterable[Any]]) -> None:
        """Relay one assistant turn's events to the UI; it always ends with TurnEnded, whatever fails."""
        cancel = self.turn_cancel = threading.Event()
        try:
            assistant = self.assistant_for(self.cluster)  # type: ignore[attr-defined]
            for event in events(assistant, cancel):
                self.post_message(AssistantUpdate(event))  # type: ignore[attr-defined]
        except Exception as exc:
            self._failed(what, exc)
        finally:
            self.post_message(TurnEnded())  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="fix")
    def propose_fix(self, finding: Finding) -> None:
        try:
            fix = fixes.propose(self.doctor, self.cluster, finding.check, finding.resource, self.audit)
        except Exception as exc:
            self._failed("fix", exc)
            return
        if not fix.calls:
            text = "\n".join(["Nothing to apply automatically:", "", "```text", *fix.notes, "```"])
            self.post_message(FixReport(text, ok=False, applied=False))  # type: ignore[attr-defined]
        else:
            self.post_message(FixProposed(fix))  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="fix")
    def apply_user_fix(self, fix: fixes.ProposedFix) -> None:
        try:
            result, text = fixes.apply(self.doctor, fix, self.audit, self.verify_delays)
        except Exception as exc:
            self._failed("fix", exc)
            return
        verdict = "Fixed and verified" if result.ok else "Not fixed"
        self.post_message(FixReport(f"**{verdict}: {fix.target}**\n\n{text}", result.ok, True))  # type: ignore
