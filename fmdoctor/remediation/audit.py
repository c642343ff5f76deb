"""The append-only audit trail: one JSON object per line for every plan, pre-flight, approval, apply and
verification, with who (local user, host, IAM caller), when, the cluster and the exact calls.

Default path ``$FMDOCTOR_AUDIT_LOG``, else ``$XDG_STATE_HOME/fmdoctor/audit.jsonl`` (XDG's place for
logs and history; ``~/.local/state`` when unset). The file is created owner-only and only ever appended
to, under an exclusive lock, so concurrent front ends (CLI, Slack, MCP) never interleave lines.
Records hold API parameters (ids, CIDRs, tags), never credentials.

The log is the record, so a record that cannot be written stops what it records (:class:`AuditError`,
exit 3): every write is checked to the last byte and fsynced; a write that fails part-way is cut back, so
no torn line is left; a symbolic link (``O_NOFOLLOW``), something that is not a regular file (``/dev/full``,
a FIFO) and a world-writable file (anyone could forge or erase records) are refused. The approval is
written before the first AWS call, so a change is never applied without its record.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import json
import os
import socket
import stat
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.aws import Aws
from fmdoctor.engine.errors import ConfigError, describe_aws_failure
from fmdoctor.safety.text import dumps_json, visible

if TYPE_CHECKING:
    from fmdoctor.engine.api import Doctor
    from fmdoctor.remediation.plan import FixPlan


def default_audit_path() -> Path:
    explicit = os.environ.get("FMDOCTOR_AUDIT_LOG")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "fmdoctor" / "audit.jsonl"


def local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return f"uid:{os.getuid()}"


def caller_identity(aws: Aws) -> dict[str, Any]:
    """Who AWS thinks we are (sts:GetCallerIdentity needs no permission); an error is recorded, not raised."""
    try:
        identity = aws.client("sts").get_caller_identity()
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        return {"iam_arn": None, "account": None, "error": failure.code}
    return {"iam_arn": identity.get("Arn"), "account": identity.get("Account")}


class AuditError(ConfigError):
    """The audit log cannot be written: what needed the record was not done (exit 3)."""


_HINT = "pass --audit-log FILE or set FMDOCTOR_AUDIT_LOG to a regular file only you can write"


class AuditLog:
    _locks: dict[Path, threading.Lock] = {}
    _locks_guard = threading.Lock()

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path).expanduser() if path else default_audit_path()

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record, durably; raises :class:`AuditError` (nothing half-written) when it cannot."""
        entry = {"ts": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "event": event, **fields}
        # One line whatever the values hold: JSON escapes newlines, dumps_json the characters that hide.
        line = (dumps_json(entry, default=str, sort_keys=False) + "\n").encode()
        with self._lock():
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._append(fd, line)
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        return entry

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._error("is a symbolic link; refusing to follow it (records could land anywhere)") from None
            raise self._error(exc.strerror or str(exc)) from None
        info = os.fstat(fd)
        problem = ("is not a regular file" if not stat.S_ISREG(info.st_mode) else
                   "is writable by everyone (anyone could forge or erase records): chmod o-w it"
                   if info.st_mode & stat.S_IWOTH else None)
        if problem:
            os.close(fd)
            raise self._error(problem)
        return fd

    def _append(self, fd: int, line: bytes) -> None:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a line torn before this process: end it first
            line = b"\n" + line
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.EIO, "the write made no progress")
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # never leave a torn line behind
                os.ftruncate(fd, size)
            raise self._error(f"the record could not be written: {exc.strerror or exc}") from None

    def _error(self, problem: str) -> AuditError:
        return AuditError(f"cannot write the audit log {visible(self.path, lines=False)}: {problem}", hint=_HINT)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def _lock(self) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(self.path.resolve(), threading.Lock())


def who(identity: dict[str, Any] | None) -> dict[str, Any]:
    return {"local_user": local_user(), "host": socket.gethostname(), **(identity or {})}


def audit_log_for(doctor: Doctor, audit: AuditLog | None) -> AuditLog:
    """The log given, else the one a front end put in ``doctor.extras['audit_log']``, else the default."""
    if audit is not None:
        return audit
    configured = doctor.extras.get("audit_log")
    return configured if isinstance(configured, AuditLog) else AuditLog()


def plan_fields(plan: FixPlan) -> dict[str, Any]:
    """What every audit record of a plan carries, so each line stands on its own."""
    return {"cluster": plan.cluster, "region": plan.region, "account": plan.account, "check": plan.check,
            "plan_digest": plan.digest, "calls": plan.calls}


DECLINED, REFUSED = "declined", "refused"


def record_decision(doctor: Any, decision: str, reason: str, plan: Any = None, approver: str | None = None,
                    channel: str | None = None, audit: AuditLog | None = None, **fields: Any) -> dict[str, Any]:
    """One record for a decision that changed nothing, whichever front end it came through: a person declined
    (``declined``), or fmdoctor refused (``refused``: no approval, a forged or stale digest, an answer that is
    not a yes, a tool the policy does not allow). An approval is recorded by ``apply_fix`` itself."""
    event = "declined" if decision == DECLINED else "approval-refused"
    ids = {**fields, **(plan_fields(plan) if plan is not None and hasattr(plan, "digest") else {})}
    return audit_log_for(doctor, audit).record(
        event, **ids, who=who(getattr(plan, "identity", None)), approver=approver, channel=channel,
        outcome=DECLINED if decision == DECLINED else REFUSED, reason=reason)
