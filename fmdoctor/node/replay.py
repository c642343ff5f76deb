"""A :class:`~fmdoctor.engine.host.Host` that replays recorded output, for tests, bug reports and offline demos.

Commands answer by their full command line (``"nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT"``) or, for tests,
by program name (``argv[0]``), with ``(returncode, stdout, stderr)``; 124 means it timed out. Files answer by
path (None: unreadable), directories by path or, when not given, from the files below them. ``instance_type=None``
means no IMDS. A strict host (one loaded from a ``--record`` directory) answers only what was recorded: asking it
anything else is a question the node was never asked, reported as not verified rather than invented.
"""

from __future__ import annotations

from collections.abc import Sequence

from fmdoctor.engine.check import Unverified
from fmdoctor.engine.host import CommandResult, ImdsUnavailable

Answer = tuple[int, str, str]


class NotRecorded(Unverified):
    """The recording has no answer for what a check asked (recorded by another fmdoctor version?)."""


class ReplayHost:
    def __init__(
        self,
        commands: dict[str, Answer] | None = None,
        files: dict[str, str | None] | None = None,
        instance_type: str | None = "p5.48xlarge",
        instance_id: str = "i-0123456789abcdef0",
        name: str = "ip-10-0-1-23",
        dirs: dict[str, list[str] | None] | None = None,
        metadata: dict[str, str | None] | None = None,
        imds_error: str | None = None,
        strict: bool = False,
        missing: Sequence[str] = (),
    ):
        self.name = name
        self.commands = commands or {}
        self.files = files or {}
        self.dirs = dirs or {}
        self.missing = set(missing)  # command lines recorded as "not installed"
        if metadata is None:
            metadata = {"latest/meta-data/instance-type": instance_type, "latest/meta-data/instance-id": instance_id}
            if instance_type is None:
                imds_error = imds_error or "not on EC2 (no instance metadata)"
        self.metadata = metadata
        self.imds_error = imds_error
        self.strict = strict
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], timeout: float = 15.0) -> CommandResult:
        argv = tuple(argv)
        self.ran.append(argv)
        line = " ".join(argv)
        answer = self.commands.get(line, self.commands.get(argv[0]) if not self.strict else None)
        if answer is None:
            if self.strict and line not in self.missing:
                raise NotRecorded(f"`{line}` is not in the recording")
            return CommandResult(argv, 127, missing=True, stderr=f"{argv[0]}: not found")
        returncode, stdout, stderr = answer
        return CommandResult(argv, returncode, stdout, stderr, timed_out=returncode == 124)

    def read_text(self, path: str) -> str | None:
        if self.strict and path not in self.files:
            raise NotRecorded(f"{path} is not in the recording")
        return self.files.get(path)

    def list_dir(self, path: str) -> list[str] | None:
        path = path.rstrip("/")
        if path in self.dirs or self.strict:
            if path not in self.dirs:
                raise NotRecorded(f"the listing of {path} is not in the recording")
            return self.dirs[path]
        prefix = path + "/"
        below = sorted({p[len(prefix):].split("/", 1)[0] for p in self.files if p.startswith(prefix)})
        return below or None

    def imds(self, path: str) -> str | None:
        if self.imds_error is not None:
            raise ImdsUnavailable(self.imds_error)
        if self.strict and path not in self.metadata:
            raise NotRecorded(f"IMDS {path} is not in the recording")
        return self.metadata.get(path)


def files_from_head(text: str) -> dict[str, str | None]:
    """Files captured with ``head -n 100 FILE...`` (each under a ``==> PATH <==`` line), as ReplayHost files."""
    files: dict[str, str | None] = {}
    path, lines = None, []
    for line in text.splitlines():
        if line.startswith("==> ") and line.endswith(" <=="):
            if path is not None:
                files[path] = "\n".join(lines).strip("\n") + "\n"
            path, lines = line[4:-4], []
        elif path is not None:
            lines.append(line)
    if path is not None:
        files[path] = "\n".join(lines).strip("\n") + "\n"
    return files
