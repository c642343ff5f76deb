"""Every message the TUI's workers and widgets post: workers run in threads and talk to the UI only so."""

from __future__ import annotations

from typing import Any

from textual.message import Message

from fmdoctor.engine.model import Finding, Report


class CheckUpdate(Message):
    """A check started or finished (from Doctor.check's progress or the assistant's CheckProgress)."""

    def __init__(self, check_id: str, phase: str, findings: int = 0, errors: int = 0, done: int = 0,
                 total: int = 0) -> None:
        super().__init__()
        self.check_id, self.phase, self.findings, self.errors = check_id, phase, findings, errors
        self.done, self.total = done, total


class ChecksStarted(Message):
    def __init__(self, cluster: str, run: Any = None) -> None:
        super().__init__()
        self.cluster, self.run = cluster, run


class ChecksDone(Message):
    """A run ended: ``report`` is None when it failed (the failure is its own message)."""

    def __init__(self, report: Report | None, cancelled: bool = False, run: Any = None) -> None:
        super().__init__()
        self.report, self.cancelled, self.run = report, cancelled, run  # run: which run (a newer one wins)


class AssistantUpdate(Message):
    """One event of Assistant.stream: ToolStarted, ToolFinished, AnswerToken, ApprovalNeeded, TurnFinished."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class TurnEnded(Message):
    """The assistant's worker is done (answered, cancelled or failed): the input may be used again."""


class FixProposed(Message):
    def __init__(self, fix: Any) -> None:
        super().__init__()
        self.fix = fix


class FixReport(Message):
    """Markdown for the chat about a fix the user asked for: applied and verified, declined, or nothing to do."""

    def __init__(self, text: str, ok: bool, applied: bool) -> None:
        super().__init__()
        self.text, self.ok, self.applied = text, ok, applied


class WorkFailed(Message):
    def __init__(self, what: str, message: str, hint: str | None = None) -> None:
        super().__init__()
        self.what, self.message, self.hint = what, message, hint


class FindingChosen(Message):
    """A finding was selected in the table (Enter or click): show its evidence and runbook."""

    def __init__(self, finding: Finding) -> None:
        super().__init__()
        self.finding = finding
