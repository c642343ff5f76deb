"""The append-only audit trail: one JSON object per line for every plan, pre-flight, approval, apply and
verification, with who (local user, host, IAM caller), when, the cluster and the exact calls.

Default path ``$FMDOCTOR_AUDIT_LOG``, else ``$XDG_STATE_HOME/fmdoctor/audit.jsonl`` (XDG's place for
logs and history; ``~/.local/state`` when unset). The file is created owner-only and only ever appended
to, one ``write`` per record under an exclusive lock, so concurrent front ends (CLI, Slack, MCP) never
interleave lines. Records hold API parameters (ids, CIDRs, tags), never credentials.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fmdoctor.engine.aws import Aws
from fmdoctor.engine.errors import ConfigError, describe_aws_failure


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


class AuditLog:
    _locks: dict[Path, threading.Lock] = {}
    _locks_guard = threading.Lock()

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path).expanduser() if path else default_audit_path()

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        """Append one record; a log that cannot be written stops the operation (no unaudited changes)."""
        entry = {"ts": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "event": event, **fields}
        line = (json.dumps(entry, ensure_ascii=False, default=str, sort_keys=False) + "\n").encode()
        with self._lock():
            try:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except OSError as exc:
                raise ConfigError(f"cannot write the audit log {self.path}: {exc.strerror or exc}",
                                  hint="pass --audit-log FILE or set FMDOCTOR_AUDIT_LOG to a writable path") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, line)
                os.fsync(fd)
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        return entry

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def _lock(self) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(self.path.resolve(), threading.Lock())


def who(identity: dict[str, Any] | None) -> dict[str, Any]:
    return {"local_user": local_user(), "host": socket.gethostname(), **(identity or {})}
