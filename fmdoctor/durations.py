"""Durations as people write them in flags and YAML: '90s', '30m', '2h', '1d', '1h30m'.

Every number carries its unit: '5' could be seconds or minutes, and '5 m' reads as two words, so both are
refused with a message saying how to write them. A duration is at most ``MAX_DAYS`` days.
"""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DAYS = 3650
_EXAMPLES = "e.g. '90s', '30m', '2h' or '1h30m'"


def parse_duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("a duration such as '90s', '30m' or '2h' is expected, not a boolean")
    if isinstance(value, int | float):
        raise ValueError(f"{value!r} has no unit: write it with one, {_EXAMPLES}")
    if not isinstance(value, str):
        raise ValueError(f"a duration such as '90s', '30m' or '2h' is expected, not {type(value).__name__}")
    text = value.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        raise ValueError(f"{value!r} has no unit: write {text}s, {text}m or {text}h")
    if re.search(r"\s", text):
        raise ValueError(f"{value!r}: write a duration without spaces, {_EXAMPLES}")
    position, seconds = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not text or position != len(text):
        raise ValueError(f"{value!r} is not a duration; use {_EXAMPLES}")
    if seconds > MAX_DAYS * 86400:
        raise ValueError(f"{value!r} is longer than {MAX_DAYS} days")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """Compact and exact enough for evidence: '2h5m', '45s', '3d4h'."""
    total = int(round(delta.total_seconds()))
    sign = "-" if total < 0 else ""
    total = abs(total)
    if total == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count}{unit}")
        if len(parts) == 2:
            break
    return sign + "".join(parts)
