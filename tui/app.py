"""``fmdoctor chat``: the Textual app. Built with its dependencies passed in (a Doctor, an Assistant, a cluster),
so tests run it over moto and the CLI over a real account; every action calls the same engine, assistant,
runbooks and remediation libraries as the CLI."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Input

from fmdoctor.assistant import AnswerToken, ApprovalNeeded, CheckProgress, ToolFinished, ToolStarted, TurnFinished
from fmdoctor.engine.api import Doctor, utc_now
from fmdoctor.engine.model import Finding
from fmdoctor.remediation.apply import DEFAULT_VERIFY_DELAYS
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.tui import fixes
from fmdoctor.tui import messages as msg
from fmdoctor.tui.chat import ChatPane
from fmdoctor.tui.findings import FindingsPanel
from fmdoctor.tui.header import InfoHeader
from fmdoctor.tui.jobs import Jobs
from fmdoctor.tui.screens.approval import ApprovalScreen
from fmdoctor.tui.screens.cluster import ClusterScreen
from fmdoctor.tui.screens.finding import FindingScreen, runbook_for
from fmdoctor.tui.screens.help import HelpScreen
from fmdoctor.tui.screens.save import SaveScreen
from fmdoctor.tui.transcript import Transcript
from fmdoctor.words import plural

ACTIONS = (  # (action, palette title, help): one command palette entry per action
    ("rerun", "Re-run checks", "Run the checks again for this cluster (r)"),
    ("filter", "Filter findings", "Show only findings matching some words (/)"),
    ("fix", "Fix the selected finding", "Plan, dry-run, then approve or reject (f)"),
    ("show_finding", "Show the selected finding", "Evidence and the filled-in runbook (enter)"),
    ("switch_cluster", "Switch cluster", "Check and chat about another cluster (c)"),
    ("save", "Save transcript", "Write this session as Markdown (ctrl+s)"),
    ("stop", "Cancel", "Stop running checks and the assistant's turn (esc on the table)"),
    ("help", "Help", "Keys and what they do (?)"),
)


class FmdoctorApp(Jobs, App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "fmdoctor"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    BINDINGS = [
        Binding("r", "rerun", "Re-run"), Binding("slash", "filter", "Filter"), Binding("f", "fix", "Fix"),
        Binding("c", "switch_cluster", "Cluster"), Binding("i", "focus_ask", "Ask", show=False),
        Binding("ctrl+s", "save", "Save"), Binding("escape", "cancel", "Cancel"),
        Binding("question_mark", "help", "Help"), Binding("q", "quit", "Quit"),
    ]

    def __init__(self, doctor: Doctor, cluster: str, assistant: Any | None = None, *,
                 assistant_factory: Callable[[str], Any] | None = None, audit: AuditLog | None = None,
                 only: Sequence[str] | None = None, clock: Callable[[], datetime] = utc_now,
                 verify_delays: Sequence[float] = DEFAULT_VERIFY_DELAYS, check_on_start: bool = True,
                 transcript_dir: Path | None = None) -> None:
        super().__init__()
        self.doctor, self.cluster, self.only = doctor, cluster, list(only) if only else None
        self.audit = audit or doctor.extras.get("audit_log") or AuditLog()
        doctor.extras["audit_log"] = self.audit  # the assistant's fixes are audited in the same log
        self.verify_delays, self.check_on_start = verify_delays, check_on_start
        self.transcript_dir = transcript_dir or Path.cwd()
        self.transcript = Transcript(cluster, clock)
        self._assistants: dict[str, Any] = {cluster: assistant} if assistant is not None else {}
        self._factory = assistant_factory
        self._model = getattr(assistant, "model", None)
        self._lock = threading.Lock()
        self.check_cancel, self.turn_cancel = threading.Event(), threading.Event()
        self.checks_running = self.turn_running = self._refresh_after_turn = False
        self._waiting_fix: fixes.ProposedFix | None = None

    # -- layout ---------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield InfoHeader(id="header")
        with Horizontal(id="body"):
            yield ChatPane(id="chat")
            yield FindingsPanel(id="findings")
        yield Footer()

    @property
    def chat(self) -> ChatPane:
        return self.query_one(ChatPane)

    @property
    def findings(self) -> FindingsPanel:
        return self.query_one(FindingsPanel)

    def on_mount(self) -> None:
        self._update_header()
        self.findings.table.focus()  # keys work at once (footer); i or a click goes to the question box
        if self.check_on_start:
            self.run_checks()

    def assistant_for(self, cluster: str) -> Any:
        """The cluster's assistant, built on first use (in a worker: building one takes a moment)."""
        with self._lock:
            if cluster not in self._assistants:
                if self._factory is not None:
                    self._assistants[cluster] = self._factory(cluster)
                else:
                    from fmdoctor.assistant import Assistant

                    self._assistants[cluster] = Assistant(self.doctor, cluster, model=self._model or
                                                          self.doctor.settings.agent.model)
            return self._assistants[cluster]

    def _update_header(self, status: str | None = None) -> None:
        self.query_one(InfoHeader).show(self.doctor, self.cluster, self._assistants.get(self.cluster), status)

    # -- actions --------------------------------------------------------------------------------------------

    def action_rerun(self) -> None:
        self.run_checks()

    def action_filter(self) -> None:
        self.findings.add_class("-filtering")
        self.screen.set_focus(self.findings.query_one("#filter", Input))

    def action_focus_ask(self) -> None:
        self.screen.set_focus(self.query_one("#ask", Input))  # now, not later: the next keys are the question

    def action_cancel(self) -> None:
        """Esc: out of a text box (or anything else) back to the table first; there, it cancels what runs."""
        if isinstance(self.focused, Input) or (self.focused is not self.findings.table and not self.busy):
            if isinstance(self.focused, Input) and self.focused.id == "filter" and not self.focused.value:
                self.findings.remove_class("-filtering")
            self.findings.table.focus()
        elif self.busy:
            self.action_stop()

    def action_stop(self) -> None:
        if self.busy:
            self.check_cancel.set()
            self.turn_cancel.set()
            self.notify("Cancelling: running checks stop at their next step.", title="Cancel")

    @property
    def busy(self) -> bool:
        return self.checks_running or self.turn_running

    def notify(self, message: str, *, markup: bool = False, **kwargs: Any) -> None:  # type: ignore[override]
        """Never markup by default: notifications carry text from AWS, the model and the tools."""
        super().notify(message, markup=markup, **kwargs)

    async def action_quit(self) -> None:
        self.check_cancel.set()  # thread workers cannot be killed: ask them to stop at their next step
        self.turn_cancel.set()
        self.exit()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_show_finding(self) -> None:
        self.findings.action_choose()

    def action_fix(self, finding: Finding | None = None) -> None:
        finding = finding or self.findings.selected
        if finding is None:
            self.notify("Select a finding in the table first (or ask the assistant to fix something).",
                        severity="warning")
            return
        if not fixes.has_fix(finding):
            self.notify(f"{finding.check} has no automated fix; its runbook says what to do (Enter shows it).",
                        title="No automated fix", severity="warning")
            return
        self.chat.add_markdown(f"Planning a fix for `{finding.id}` (dry run only)…")
        self.propose_fix(finding)

    def action_switch_cluster(self) -> None:
        known = list(dict.fromkeys([self.cluster, *self.doctor.settings.clusters]))
        self.push_screen(ClusterScreen(known, self.cluster), self._switch_to)

    def _switch_to(self, name: str | None) -> None:
        if not name or name == self.cluster:
            return
        self.check_cancel.set()
        self.turn_cancel.set()
        self.cluster = name
        self.transcript.add("note", f"Switched to cluster {name}.")
        self.chat.add_markdown(f"Switched to cluster **{name}**.")
        self.findings.show_report(None)
        self._update_header()
        self.run_checks()

    def action_save(self) -> None:
        self.push_screen(SaveScreen(str(self.transcript_dir / self.transcript.default_name())), self._save)

    def _save(self, path: str | None) -> None:
        if not path:
            return
        try:
            saved = self.transcript.save(Path(path))
        except OSError as exc:
            self.notify(f"{path}: {exc.strerror or exc}", title="Could not save the transcript", severity="error")
            return
        self.notify(str(saved), title="Transcript saved")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for action, title, help_text in ACTIONS:
            yield SystemCommand(title, help_text, getattr(self, f"action_{action}"))

    # -- messages -------------------------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "ask" or not event.value.strip():
            return
        if self.turn_running:
            self.notify("The assistant is still answering; press Esc to cancel it.", severity="warning")
            return
        question = event.value.strip()
        event.input.value = ""
        self.transcript.add("you", question)
        self.chat.add_question(question)
        self.turn_running = True
        self.ask(question)

    def on_checks_started(self, message: msg.ChecksStarted) -> None:
        self.checks_running = True
        self.findings.show_error(None)  # a new run: the last one's failure is history
        self.findings.query_one("#progress").start(message.cluster)

    def on_check_update(self, m: msg.CheckUpdate) -> None:
        self.findings.query_one("#progress").update_check(m.check_id, m.phase, m.findings, m.errors, m.done,
                                                          m.total)

    def on_checks_done(self, message: msg.ChecksDone) -> None:
        if message.run is not None and message.run is not self.check_cancel:
            return  # an older run that a newer one replaced
        self.checks_running = False
        report = message.report
        progress = self.findings.query_one("#progress")
        if report is None or report.cluster != self.cluster:
            progress.finish("cancelled" if message.cancelled else "checks could not run:")
            return
        self.findings.show_report(report)
        self._update_header(report.status.value)
        summary = (f"{plural(len(report.stats.checks_run), 'check')} · {plural(len(report.findings), 'finding')} · "
                   f"{len(report.errors)} not verified · {report.stats.duration_s:.1f}s"
                   + (" · cancelled" if message.cancelled else ""))
        progress.finish(summary)
        if report.errors:
            parts = "; ".join(f"{e.check}: {e.code}" for e in report.errors[:3])
            more = f" and {len(report.errors) - 3} more" if len(report.errors) > 3 else ""
            title = f"{plural(len(report.errors), 'part')} could not be verified"
            text = f"{parts}{more}. Unverified parts are not reported as healthy."
            # kept in the findings pane, not raised as a toast: a toast at start-up covered the findings table
            self.findings.show_error(f"{title}: {text}", severity="warning")

    def on_assistant_update(self, message: msg.AssistantUpdate) -> None:
        event, chat = message.event, self.chat
        if isinstance(event, ToolStarted):
            chat.tool_started(event.call_id, event.name, event.args)
        elif isinstance(event, ToolFinished):
            chat.tool_finished(event.call_id, event.name, event.args, event.status, event.duration_s,
                               event.finding_count, event.message)
            self.transcript.add("tool", f"{event.name}({event.args}): {event.status}, "
                                        f"{plural(event.finding_count, 'finding')}, {event.duration_s:.1f}s")
        elif isinstance(event, CheckProgress):
            chat.check_progress(event.done, event.total)
        elif isinstance(event, AnswerToken):
            chat.add_token(event.text)
        elif isinstance(event, TurnFinished):
            chat.finish_answer(event.answer.answer)
            self.transcript.add("fmdoctor", event.answer.answer)
        elif isinstance(event, ApprovalNeeded):
            self._waiting_fix = fixes.ProposedFix.from_request(event.request)  # asked once the turn has ended

    def on_turn_ended(self, _: msg.TurnEnded) -> None:
        self.turn_running = False
        waiting, self._waiting_fix = self._waiting_fix, None
        if waiting is not None:
            self._ask_approval(waiting)
        elif self._refresh_after_turn:  # the assistant applied a fix: show the findings as they are now
            self._refresh_after_turn = False
            self.run_checks()

    def on_fix_proposed(self, message: msg.FixProposed) -> None:
        self._ask_approval(message.fix)

    def _ask_approval(self, fix: fixes.ProposedFix) -> None:
        def decided(approved: bool | None) -> None:
            self.transcript.add("fix", f"{'Approved' if approved else 'Rejected'} plan {fix.digest} for "
                                       f"{fix.target}.")
            if fix.request is not None:  # the assistant's plan: it applies or declines, and says so
                self.turn_running, self._refresh_after_turn = True, bool(approved)
                self.resume(fixes.approve(fix) if approved else None)
            elif approved:
                self.chat.add_markdown(f"Applying plan `{fix.digest[:12]}` to `{fix.target}`…")
                self.apply_user_fix(fix)
            else:
                fixes.decline(fix, self.audit)
                self.chat.add_markdown(f"Rejected plan `{fix.digest[:12]}`: nothing was changed.")

        self.push_screen(ApprovalScreen(fix), decided)

    def on_fix_report(self, message: msg.FixReport) -> None:
        self.chat.add_markdown(message.text, classes="answer")
        self.transcript.add("fix", message.text)
        if message.applied:
            self.run_checks()

    def on_work_failed(self, message: msg.WorkFailed) -> None:
        text = message.message + (f"\n{message.hint}" if message.hint else "")
        self.transcript.add("note", f"{message.what} failed: {text}")
        self.notify(text, title=f"{message.what.capitalize()} failed", severity="error", timeout=15)
        self.findings.show_error(f"{message.what.capitalize()} failed: {text}")

    def on_finding_chosen(self, message: msg.FindingChosen) -> None:
        finding, report = message.finding, self.findings.report
        text, error = runbook_for(finding, self.doctor.settings, self.cluster, report.region if report else None,
                                  demo=self.doctor.demo)
        self.push_screen(FindingScreen(finding, text, error), lambda choice: self._after_finding(finding, choice))

    def _after_finding(self, finding: Finding, choice: str | None) -> None:
        if choice == "fix":
            self.action_fix(finding)
