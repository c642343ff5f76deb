"""A :class:`~fmdoctor.engine.host.Host` that replays recorded output, for tests and offline demos.

Commands answer by program name (``argv[0]``) with ``(returncode, stdout, stderr)``; 124 means it timed out.
Programs not listed are missing, files not listed unreadable, and ``instance_type=None`` means no IMDS.
"""

from __future__ import annotations

from collections.abc import Sequence

from fmdoctor.engine.host import CommandResult, ImdsUnavailable


class ReplayHost:
    def __init__(
        self,
        commands: dict[str, tuple[int, str, str]] | None = None,
        files: dict[str, str] | None = None,
        instance_type: str | None = "p5.48xlarge",
        instance_id: str = "i-0123456789abcdef0",
        name: str = "ip-10-0-1-23",
    ):
        self.name = name
        self.commands = commands or {}
        self.files = files or {}
        self.metadata = {"latest/meta-data/instance-type": instance_type, "latest/meta-data/instance-id": instance_id}
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], timeout: float = 15.0) -> CommandResult:
        argv = tuple(argv)
        self.ran.append(argv)
        answer = self.commands.get(argv[0])
        if answer is None:
            return CommandResult(argv, 127, missing=True, stderr=f"{argv[0]}: not found")
        returncode, stdout, stderr = answer
        return CommandResult(argv, returncode, stdout, stderr, timed_out=returncode == 124)

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def imds(self, path: str) -> str | None:
        if self.metadata["latest/meta-data/instance-type"] is None:
            raise ImdsUnavailable("not on EC2 (no instance metadata)")
        return self.metadata.get(path)
