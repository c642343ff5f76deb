"""The header line: which cluster, region, profile and model this session talks to, and the last status."""

from __future__ import annotations

import os
from typing import Any

from rich.text import Text
from textual.widgets import Static

STATUS_STYLE = {"ok": "bold green", "warning": "bold yellow", "critical": "bold red", "unknown": "bold magenta"}


class InfoHeader(Static):
    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.fields: dict[str, str] = {}
        self.status: str | None = None

    def show(self, doctor: Any, cluster: str, assistant: Any = None, status: str | None = None) -> None:
        """Where the session points: flags, then the cluster's config, then the AWS environment."""
        settings = doctor.cluster_settings(cluster)
        region = (doctor.connection.region or settings.region or os.environ.get("AWS_REGION")
                  or os.environ.get("AWS_DEFAULT_REGION") or "default")
        profile = doctor.connection.profile or settings.profile or os.environ.get("AWS_PROFILE") or "default"
        model = getattr(assistant, "model_name", None) or doctor.settings.agent.model or "offline"
        self.set(cluster=cluster, region=region, profile=profile, model=model, status=status)

    def set(self, *, cluster: str, region: str, profile: str, model: str, status: str | None = None) -> None:
        self.fields = {"cluster": cluster, "region": region, "profile": profile, "model": model}
        self.status = status
        self._render_line()

    def set_status(self, status: str | None) -> None:
        self.status = status
        self._render_line()

    def _render_line(self) -> None:
        line = Text()
        if self.status:  # the verdict first: it is what a narrow terminal must still show
            line.append(f"● {self.status} ", style=STATUS_STYLE.get(self.status, "bold"))
        for n, (key, value) in enumerate(self.fields.items()):
            line.append(f"{' · ' if n else ''}{key} ", style="dim")
            line.append(value, style="bold")
        self.update(line)
