"""Recorded inputs for the on-node checks: ``fmdoctor check --local --record DIR`` and ``--replay DIR``.

Recording wraps the real host and writes down, as it happens, everything the checks asked the node and every
answer: each command's exit status, stdout and stderr, each file read, each directory listed, each IMDS answer,
and the run's time. The directory holds the raw outputs as files (``commands/NN-program.stdout``, ``files/...``)
and a ``manifest.json`` that says which answer belongs to which question, so a user can read what they send and
anyone can replay the verdicts without the machine. Replaying is strict: a question the node was never asked is
not verified, never answered with a guess. The directory is data: paths in the manifest must stay inside it.

Recordings are written by the one safe writer (:class:`~fmdoctor.engine.safe_files.SafeWriter`: a fresh or
empty directory of the user's, files created 0600 with no-follow and exclusive create, so a link planted in a
directory someone else made is never written through) and read back by the one bounded reader (regular files
only, ``MAX_FILE_BYTES`` each and ``MAX_TOTAL_BYTES`` in all, a refusal naming the file).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from fmdoctor.engine.host import CommandResult, Host, ImdsUnavailable
from fmdoctor.engine.safe_files import BoundedReader, FileRefused, SafeWriter
from fmdoctor.node.replay import ReplayHost

FORMAT = "fmdoctor-node-recording/1"
MANIFEST = "manifest.json"
MAX_FILE_BYTES = 16 * 1024 * 1024  # the largest output a node check reads (a long dmesg) is far smaller
MAX_TOTAL_BYTES = 64 * 1024 * 1024


class RecordingError(ValueError):
    """The directory is not a recording fmdoctor can replay."""


class RecordingHost:
    """A host that answers from ``inner`` and keeps every question and answer for :meth:`save`."""

    def __init__(self, inner: Host):
        self.inner = inner
        self.name = inner.name
        self._lock = threading.Lock()
        self.commands: list[dict[str, Any]] = []
        self.files: dict[str, str | None] = {}
        self.dirs: dict[str, list[str] | None] = {}
        self.metadata: dict[str, str | None] = {}
        self.imds_error: str | None = None

    def run(self, argv: Sequence[str], timeout: float = 15.0) -> CommandResult:
        result = self.inner.run(argv, timeout)
        with self._lock:
            if not any(c["argv"] == list(result.argv) for c in self.commands):
                self.commands.append({"argv": list(result.argv), "result": result})
        return result

    def read_text(self, path: str) -> str | None:
        text = self.inner.read_text(path)
        with self._lock:
            self.files[path] = text
        return text

    def list_dir(self, path: str) -> list[str] | None:
        names = self.inner.list_dir(path)
        with self._lock:
            self.dirs[path.rstrip("/")] = names
        return names

    def imds(self, path: str) -> str | None:
        try:
            value = self.inner.imds(path)
        except ImdsUnavailable as exc:
            with self._lock:
                self.imds_error = str(exc)
            raise
        with self._lock:
            self.metadata[path] = value
        return value

    def save(self, directory: Path | SafeWriter, recorded_at: datetime) -> Path:
        """Write the recording into ``directory``, new or empty (or a writer :func:`open_directory` made before
        the run); RecordingError if refused."""
        writer = directory if isinstance(directory, SafeWriter) else open_directory(directory)
        try:
            self._save(writer, recorded_at)
        except FileRefused as exc:
            raise RecordingError(str(exc)) from None
        finally:
            writer.close()
        return writer.root


    def _save(self, writer: SafeWriter, recorded_at: datetime) -> None:
        commands = []
        for number, entry in enumerate(sorted(self.commands, key=lambda c: c["argv"]), 1):  # stable across runs
            result: CommandResult = entry["result"]
            stem = f"commands/{number:02d}-{_safe(Path(result.argv[0]).name)}"
            writer.write_text(f"{stem}.stdout", result.stdout)
            writer.write_text(f"{stem}.stderr", result.stderr)
            commands.append({"argv": entry["argv"], "returncode": result.returncode, "missing": result.missing,
                             "timed_out": result.timed_out, "stdout": f"{stem}.stdout", "stderr": f"{stem}.stderr"})
        files: dict[str, str | None] = {}
        for number, (path, text) in enumerate(sorted(self.files.items()), 1):
            if text is None:
                files[path] = None
                continue
            name = f"files/{number:03d}-{_safe(path.strip('/').replace('/', '_'))[-80:]}"
            writer.write_text(name, text)
            files[path] = name
        manifest = {"format": FORMAT, "recorded_at": recorded_at.isoformat(), "host": self.name,
                    "commands": commands, "files": files, "dirs": dict(sorted(self.dirs.items())),
                    "imds": self.metadata, "imds_error": self.imds_error}
        writer.write_text(MANIFEST, json.dumps(manifest, indent=2) + "\n")


def open_directory(directory: Path) -> SafeWriter:
    """The recording's directory, created (or checked new and empty) before anything runs."""
    try:
        return SafeWriter(directory)
    except (FileRefused, OSError) as exc:
        raise RecordingError(str(exc)) from None


def load(directory: Path) -> tuple[ReplayHost, datetime]:
    """The host a recording describes, answering strictly what was recorded, and the time it was recorded."""
    root = directory.resolve()
    reader = BoundedReader(MAX_FILE_BYTES, MAX_TOTAL_BYTES)
    try:
        manifest = json.loads(reader.read_text(root / MANIFEST))
    except FileRefused as exc:
        raise RecordingError(f"{directory}: no readable {MANIFEST} ({exc})") from None
    except (OSError, ValueError) as exc:
        raise RecordingError(f"{directory}: no readable {MANIFEST} ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise RecordingError(f"{directory}: {MANIFEST} is not an fmdoctor node recording ({FORMAT})")

    def read(relative: str | None) -> str | None:
        if relative is None:
            return None
        path = (root / relative).resolve()
        if not path.is_relative_to(root):
            raise RecordingError(f"{directory}: {relative!r} points outside the recording")
        try:
            return reader.read_text(root / relative)
        except FileRefused as exc:
            raise RecordingError(f"{directory}: {exc}") from None

    try:
        commands, missing = {}, []
        for entry in manifest["commands"]:
            line = " ".join(str(a) for a in entry["argv"])
            if entry.get("missing"):
                missing.append(line)
                continue
            returncode = 124 if entry.get("timed_out") else int(entry["returncode"])
            commands[line] = (returncode, read(entry["stdout"]) or "", read(entry["stderr"]) or "")
        files = {str(path): read(name) for path, name in manifest["files"].items()}
        dirs = {str(path): (None if names is None else [str(n) for n in names])
                for path, names in manifest["dirs"].items()}
        recorded_at = datetime.fromisoformat(manifest["recorded_at"])
        host = ReplayHost(commands, files, name=str(manifest["host"]), dirs=dirs,
                          metadata=dict(manifest.get("imds") or {}), imds_error=manifest.get("imds_error"),
                          strict=True, missing=missing)
    except RecordingError:
        raise
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise RecordingError(f"{directory}: malformed recording ({type(exc).__name__}: {exc})") from exc
    return host, recorded_at


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "x"
