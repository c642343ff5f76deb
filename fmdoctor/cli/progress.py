"""Progress on stderr (never stdout) for runs that take longer than a second."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

from fmdoctor.words import plural

if TYPE_CHECKING:
    from fmdoctor.engine.api import Doctor
    from fmdoctor.engine.runner import CheckEvent


def starting(doctor: Doctor, cluster: str, doing: str, stream: TextIO) -> None:
    """The line a run starts with, at once: which cluster, and what it reads first from where, so a terminal is
    never blank while AWS (or an endpoint that does not answer) is being waited for."""
    settings = doctor.cluster_settings(cluster)
    region = doctor.connection.region or settings.region
    # the inventory is EC2's: where its calls go, in botocore's order (an explicit URL, then EC2's own variable)
    where = (doctor.connection.endpoint_url or doctor.settings.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_EC2")
             or os.environ.get("AWS_ENDPOINT_URL"))
    if "demo" in doctor.extras:
        where = "the demo's in-process AWS (moto)"
    stream.write(f"fmdoctor: {doing} cluster {cluster}{f' in {region}' if region else ''}: reading its inventory "
                 f"(EC2 instances, network interfaces, security groups) from {where or 'AWS'}...\n")
    stream.flush()


class ProgressLine:
    """Silent for the first second; then one line per event (rewritten in place on a terminal)."""

    def __init__(self, stream: TextIO | None = None, delay_s: float = 1.0, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.delay_s = delay_s
        self.enabled = enabled
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._dirty = False

    def wanted(self) -> bool:
        return self.enabled and time.monotonic() - self.started >= self.delay_s

    def write(self, line: str) -> None:
        with self._lock:
            if self._tty:
                self.stream.write("\r\x1b[2K" + line[:79])
                self._dirty = True
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        with self._lock:
            if self._dirty:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._dirty = False


class StderrProgress(ProgressLine):
    """One line per finished check."""

    def __call__(self, event: CheckEvent) -> None:
        if event.phase != "finished" or not self.wanted():
            return
        outcome = "skipped" if event.skipped else plural(event.findings, "finding")
        if event.errors:
            outcome += f", {plural(event.errors, 'error')}"
        self.write(f"fmdoctor: [{event.done}/{event.total}] {event.check_id}: {outcome} ({event.duration_s:.1f}s)")
