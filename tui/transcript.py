"""The session as Markdown: what was asked, what the assistant did and answered, what was fixed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from fmdoctor.engine.api import utc_now


@dataclass(frozen=True)
class Entry:
    role: str  # you | fmdoctor | tool | fix | note
    text: str
    at: datetime


@dataclass
class Transcript:
    cluster: str
    clock: Callable[[], datetime] = utc_now
    entries: list[Entry] = field(default_factory=list)

    def add(self, role: str, text: str) -> Entry:
        entry = Entry(role, text, self.clock())
        self.entries.append(entry)
        return entry

    def to_markdown(self) -> str:
        started = self.entries[0].at if self.entries else self.clock()
        lines = [f"# fmdoctor session: {self.cluster}", "", f"Started {started:%Y-%m-%d %H:%M:%S %Z}".rstrip(), ""]
        for entry in self.entries:
            stamp = f"{entry.at:%H:%M:%S}"
            if entry.role == "tool":
                lines += [f"- tool call ({stamp}): {entry.text}"]
                continue
            title = {"you": "You", "fmdoctor": "fmdoctor", "fix": "Fix", "note": "Note"}.get(entry.role, entry.role)
            lines += ["", f"## {title} ({stamp})", "", entry.text.rstrip(), ""]
        return "\n".join(lines).rstrip() + "\n"

    def save(self, path: Path) -> Path:
        path = path.expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_markdown(), encoding="utf-8")
        return path

    def default_name(self) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in self.cluster)
        return f"fmdoctor-{safe}-{self.clock():%Y%m%d-%H%M%S}.md"
