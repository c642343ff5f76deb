"""The header line: which cluster, region, profile and model this session talks to, and the last status."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

STATUS_STYLE = {"ok": "bold green", "warning": "bold yellow", "critical": "bold red", "unknown": "bold magenta"}


class InfoHeader(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.fields: dict[str, str] = {}
        self.status: str | None = None

    def set(self, *, cluster: str, region: str, profile: str, model: str, status: str | None = None) -> None:
        self.fields = {"cluster": cluster, "region": region, "profile": profile, "model": model}
        self.status = status
        self._render_line()

    def set_status(self, status: str | None) -> None:
        self.status = status
        self._render_line()

    def _render_line(self) -> None:
        line = Text("fmdoctor", style="bold")
        for key, value in self.fields.items():
            line.append(f"  {key} ", style="dim")
            line.append(value, style="bold")
        if self.status:
            line.append("  status ", style="dim")
            line.append(self.status, style=STATUS_STYLE.get(self.status, "bold"))
        self.update(line)
