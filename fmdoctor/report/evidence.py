"""Short, one-line forms of evidence for people (JSON keeps it all)."""

from __future__ import annotations

from typing import Any

from fmdoctor.engine.model import Finding
from fmdoctor.safety.text import visible

_SKIP = {"fix"}  # machine-oriented; shown by 'fmdoctor fix --dry-run'


def evidence_lines(finding: Finding, limit: int = 4, width: int = 72) -> list[str]:
    lines = []
    for key, value in finding.evidence.items():
        if key in _SKIP or value == finding.resource:
            continue
        text = visible(f"{key}: {brief(value)}", lines=False)
        lines.append(text if len(text) <= width else text[: width - 1] + "…")
        if len(lines) == limit:
            break
    return lines


def brief(value: Any, items: int = 3) -> str:
    if isinstance(value, list | tuple):
        shown = ", ".join(brief(v, items) for v in value[:items])
        return shown + (f" (+{len(value) - items} more)" if len(value) > items else "")
    if isinstance(value, dict):
        pairs = list(value.items())
        shown = ", ".join(f"{brief(k)}={brief(v, items)}" for k, v in pairs[:items])
        return shown + (f" (+{len(pairs) - items} more)" if len(pairs) > items else "")
    if value is None:
        return "none"
    return str(value)
