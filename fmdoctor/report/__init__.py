"""Renderers of a :class:`~fmdoctor.engine.model.Report`: text (people), JSON (machines), Markdown (tickets),
Prometheus text exposition (alerting)."""

from __future__ import annotations

from collections.abc import Callable

from fmdoctor.engine.model import Report
from fmdoctor.report.markdown import render_markdown
from fmdoctor.report.prometheus import render_prometheus
from fmdoctor.report.text import render_text
from fmdoctor.safety.text import dumps_json


def render_json(report: Report) -> str:
    """Exact data; control and hidden characters in it escaped (``\\u202e``), never raw."""
    return dumps_json(report.to_json_dict(), indent=2)


RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "prometheus": render_prometheus,
}
