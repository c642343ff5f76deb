"""Watch mode: check a cluster every N minutes and post only when its state changes.

A change is a new status, a critical finding that was not there before, or a critical finding that is
gone (resolved). The first run posts the starting state; a run that sees the same status and the same
critical findings posts nothing, so a channel hears about a problem once, and again when it is fixed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fmdoctor.engine.api import Doctor
from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.engine.model import Report, Severity
from fmdoctor.safety.redact import redactor_for
from fmdoctor.slack import blocks
from fmdoctor.slack.outbound import redacting

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    status: str
    critical: frozenset[str] = frozenset()
    problem: str | None = None  # why the check could not run at all

    @classmethod
    def of(cls, report: Report) -> Snapshot:
        return cls(report.status.value, frozenset(f.id for f in report.findings if f.severity == Severity.CRITICAL))


@dataclass(frozen=True)
class Change:
    before: Snapshot | None
    after: Snapshot

    @property
    def new_critical(self) -> list[str]:
        return sorted(self.after.critical - (self.before.critical if self.before else frozenset()))

    @property
    def resolved(self) -> list[str]:
        return sorted((self.before.critical if self.before else frozenset()) - self.after.critical)

    @property
    def noteworthy(self) -> bool:
        return (self.before is None or self.before.status != self.after.status or bool(self.new_critical)
                or bool(self.resolved) or self.before.problem != self.after.problem)

    def headline(self, cluster: str) -> str:
        after = self.after.status.upper()
        icon = blocks.STATUS_ICON[self.after.status]
        if self.before is None:
            lines = [f"{icon} watching *{blocks.escape(cluster)}*: *{after}*"]
        elif self.before.status != self.after.status:
            lines = [f"{icon} *{blocks.escape(cluster)}*: {self.before.status.upper()} → *{after}*"]
        else:
            lines = [f"{icon} *{blocks.escape(cluster)}*: still *{after}*"]
        if self.before is not None and self.new_critical:
            lines.append("new critical: " + ", ".join(f"`{blocks.escape(i)}`" for i in self.new_critical))
        if self.resolved:
            lines.append(":white_check_mark: resolved: " + ", ".join(f"`{blocks.escape(i)}`" for i in self.resolved))
        if self.after.problem:
            lines.append(f":x: could not check: {blocks.escape(self.after.problem)}")
        return "\n".join(lines)


class Watcher:
    def __init__(self, doctor: Doctor, cluster: str, client: Any, channel: str, every: timedelta,
                 only: Sequence[str] | None = None, max_blocks: int = 40,
                 sleep: Callable[[float], None] | None = None):
        self.doctor, self.cluster, self.channel = doctor, cluster, channel
        self.client = redacting(client, redactor_for(getattr(doctor, "settings", None)))
        self.every, self.only, self.max_blocks, self.sleep = every, list(only or []) or None, max_blocks, sleep
        self.last: Snapshot | None = None

    def run_once(self) -> Change:
        """Check, compare with the previous run, post if it changed; returns the change either way."""
        report: Report | None = None
        try:
            report = self.doctor.check(self.cluster, only=self.only)
            now = Snapshot.of(report)
        except FmdoctorError as exc:
            now = Snapshot("unknown", problem=exc.message)
        change = Change(self.last, now)
        if not change.noteworthy:
            log.info("%s unchanged (%s); nothing posted", self.cluster, now.status)
        else:
            try:
                self.post(change, report)
            except Exception as exc:  # Slack unreachable or refusing: keep the old state, so it posts next run
                log.warning("could not post to %s: %s", self.channel, type(exc).__name__)
                return change
        self.last = now
        return change

    def post(self, change: Change, report: Report | None) -> None:
        headline = change.headline(self.cluster)
        if report is None:
            messages = [{"text": headline, "blocks": [blocks.section(headline)]}]
        else:
            messages = blocks.report_messages(report, self.max_blocks, title=headline)
        first_ts = None
        for message in messages:
            response = self.client.chat_postMessage(channel=self.channel, thread_ts=first_ts, **message)
            first_ts = first_ts or response.get("ts")

    def run(self, count: int | None = None) -> None:
        """Run forever (or ``count`` times), ``every`` apart."""
        done = 0
        while count is None or done < count:
            started = time.monotonic()
            self.run_once()
            done += 1
            if count is None or done < count:
                (self.sleep or _sleep)(max(0.0, self.every.total_seconds() - (time.monotonic() - started)))


def _sleep(seconds: float) -> None:
    time.sleep(seconds)
