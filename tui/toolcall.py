"""One tool call of the assistant, compact (name, time, findings) and expandable (arguments, message)."""

from __future__ import annotations

import json
from typing import Any

from textual.content import Content
from textual.widgets import Collapsible, Static

from fmdoctor.words import plural

_MARK = {"success": "✓", "error": "✗", "no_data": "∅", "approval_required": "?", "refused": "⊘"}


def title_for(name: str, args: dict[str, Any], status: str | None = None, duration_s: float | None = None,
              finding_count: int | None = None) -> str:
    short = ", ".join(f"{k}={v}" for k, v in args.items())
    if status is None:
        return f"⋯ {name}({short}) running"
    found = plural(finding_count or 0, "finding")
    return f"{_MARK.get(status, '·')} {name}({short}) · {duration_s or 0:.1f}s · {found}"


class ToolCallView(Collapsible):
    def __init__(self, call_id: str, name: str, args: dict[str, Any]) -> None:
        self.call_id, self.tool_name, self.args = call_id, name, args
        self.body = Static(self._body(None, ""), classes="tool-body", markup=False)  # tool output is data
        super().__init__(self.body, title=Content(title_for(name, args)), collapsed=True,  # type: ignore[arg-type]
                         classes="tool-call")

    @property
    def running(self) -> bool:
        return str(self.title).startswith("⋯")

    def progress(self, done: int, total: int) -> None:
        self.title = Content(f"{title_for(self.tool_name, self.args)} · {done}/{total} checks")  # type: ignore

    def finish(self, status: str, duration_s: float, finding_count: int, message: str) -> None:
        self.title = Content(title_for(self.tool_name, self.args, status, duration_s, finding_count))  # type: ignore
        self.body.update(self._body(status, message))
        self.add_class(f"-{status.replace('_', '-')}")

    def _body(self, status: str | None, message: str) -> str:
        lines = [f"tool: {self.tool_name}", f"arguments: {json.dumps(self.args, sort_keys=True)}"]
        if status is not None:
            lines.append(f"status: {status}")
        if message:
            lines.append(message)
        return "\n".join(lines)
