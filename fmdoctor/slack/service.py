"""What the Slack listeners do, apart from bolt: run checks, why-not and questions, and post the answers.

Every answer comes from the same libraries as the CLI (``Doctor.check``, ``why_not``, the assistant); this
module only decides where to post (the channel or thread a request came from) and in how many messages.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fmdoctor.config import SlackSettings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.engine.model import Finding, Report
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.safety.redact import redactor_for
from fmdoctor.slack import blocks
from fmdoctor.slack.auth import Approvers, pick_cluster
from fmdoctor.slack.commands import USAGE, Command
from fmdoctor.slack.outbound import redacting

log = logging.getLogger(__name__)


class Where:
    """A place to answer: a channel and, optionally, the thread in it."""

    def __init__(self, channel: str, thread_ts: str | None = None):
        self.channel, self.thread_ts = channel, thread_ts

    def __repr__(self) -> str:
        return f"Where({self.channel!r}, {self.thread_ts!r})"


class SlackService:
    def __init__(self, doctor: Doctor, settings: SlackSettings, client: Any, audit: AuditLog | None = None,
                 assistant_factory: Callable[[Doctor, str], Any] | None = None):
        self.doctor = doctor
        self.settings = settings
        # every post, dialog and reply: secrets (and the configured agent.redact patterns) redacted on the way out
        self.redactor = redactor_for(getattr(doctor, "settings", None))
        self.client = redacting(client, self.redactor)
        self.audit = audit or AuditLog()
        self.approvers = Approvers(settings, client)
        self._assistant_factory = assistant_factory
        self._assistants: dict[str, Any] = {}
        self._reports: OrderedDict[str, Report] = OrderedDict()
        self._lock = threading.Lock()

    # -- posting -------------------------------------------------------------------------------------------

    def post(self, where: Where, messages: list[blocks.Message]) -> str | None:
        """Post the messages; parts after the first go into the first one's thread when not already in one."""
        first_ts: str | None = None
        for message in messages:
            thread = where.thread_ts or first_ts
            response = self.client.chat_postMessage(channel=where.channel, thread_ts=thread, unfurl_links=False,
                                                    **message)
            first_ts = first_ts or response.get("ts")
        return first_ts

    def say_error(self, where: Where, exc: FmdoctorError) -> None:
        hint = f"\n_{blocks.escape(exc.hint)}_" if exc.hint else ""
        self.client.chat_postMessage(channel=where.channel, thread_ts=where.thread_ts,
                                     text=f":x: {blocks.escape(exc.message)}{hint}")

    # -- commands ------------------------------------------------------------------------------------------

    def resolve(self, command: Command, channel: str | None) -> Command:
        """The command with its cluster filled in, or NotAllowed for this channel."""
        if command.verb == "help":
            return command
        cluster = pick_cluster(self.settings, channel, command.cluster)
        return Command(command.verb, cluster, command.only, command.source, command.destination, command.port,
                       command.protocol, command.options)

    def run_command(self, command: Command, where: Where) -> list[blocks.Message]:
        """Run a resolved command and return its messages (the caller posts them)."""
        if command.verb == "help":
            return [{"text": USAGE, "blocks": [blocks.section(USAGE)]}]
        assert command.cluster is not None
        if command.verb == "check":
            report = self.doctor.check(command.cluster, only=list(command.only) or None)
            self.remember(report)
            return blocks.report_messages(report, self.settings.max_blocks)
        from fmdoctor.net.reachability import why_not
        from fmdoctor.report.reachability import render_reachability

        result = why_not(self.doctor, command.cluster, command.source, command.destination, command.port,
                         command.protocol)
        verdict = {True: ":large_green_circle: *REACHABLE*", False: ":red_circle: *BLOCKED*",
                   None: ":white_circle: *NOT VERIFIED*"}[result.reachable]
        title = f"{verdict} {blocks.escape(command.describe())}"
        return blocks.text_messages(title, render_reachability(result, command.cluster), self.settings.max_blocks)

    # -- findings and runbooks -----------------------------------------------------------------------------

    def remember(self, report: Report) -> None:
        with self._lock:
            self._reports[report.cluster] = report
            self._reports.move_to_end(report.cluster)
            while len(self._reports) > 32:
                self._reports.popitem(last=False)

    def finding(self, cluster: str, finding_id: str) -> tuple[Finding | None, str | None]:
        """The finding from the latest report of ``cluster``, else from a fresh run of its check."""
        with self._lock:
            report = self._reports.get(cluster)
        found = next((f for f in report.findings if f.id == finding_id), None) if report else None
        if found is None:
            report = self.doctor.check(cluster, only=[finding_id.split("/", 1)[0]])
            found = next((f for f in report.findings if f.id == finding_id), None)
        return found, report.region if report else None

    def runbook_messages(self, cluster: str, finding_id: str, runbook_id: str) -> list[blocks.Message]:
        from fmdoctor.runbooks import get_runbook
        from fmdoctor.runbooks.render import render_runbook

        finding, region = self.finding(cluster, finding_id)
        runbook = get_runbook(runbook_id, self.doctor.settings)
        text = blocks.markdown_to_mrkdwn(render_runbook(runbook, finding, cluster, region, self.doctor.demo))
        gone = "" if finding else " (no longer raised: shown with placeholders)"
        title = f":book: Runbook `{blocks.escape(runbook_id)}` for `{blocks.escape(finding_id)}`{gone}"
        return blocks.text_messages(title, text, self.settings.max_blocks, code=False)

    # -- questions -----------------------------------------------------------------------------------------

    def assistant(self, cluster: str) -> Any:
        with self._lock:
            if cluster not in self._assistants:
                if self._assistant_factory is not None:
                    self._assistants[cluster] = self._assistant_factory(self.doctor, cluster)
                else:
                    from fmdoctor.assistant import Assistant

                    self._assistants[cluster] = Assistant(self.doctor, cluster)
            return self._assistants[cluster]

    def answer(self, question: str, cluster: str, where: Where) -> list[blocks.Message]:
        """The assistant's answer; the thread is the conversation (session id = channel:thread)."""
        session = f"slack:{where.channel}:{where.thread_ts}"
        answer = self.assistant(cluster).ask(question, session_id=session)
        text = blocks.escape(answer.answer)
        messages = blocks.pack([[blocks.section(piece)] for piece in blocks.fenced_chunks(text)],
                               self.settings.max_blocks, text[:150])
        request = answer.approval
        if request is not None:  # approval goes through the Fix dialog and the approver list, never the model
            button = blocks.finding_fix_button(cluster, request.check_id, request.resource)
            messages[-1]["blocks"].append({"type": "actions", "block_id": "assistant-fix", "elements": [button]})
        return messages
