"""Slurm host lists (``gpu-[1-3,7],login-1``) expanded as ``scontrol show hostnames`` does.

Needed for slurmrestd, whose job ``nodes`` field is a host list and which has no ``show hostnames``.
Zero padding follows the range's first bound (``[01-03]`` gives 01 02 03), as Slurm's hostlist.c does.
"""

from __future__ import annotations

import re

_MAX_HOSTS = 100_000  # a corrupt or hostile range must not exhaust memory

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append(text[start:])
    return [p for p in (x.strip() for x in parts) if p]


def _expand_one(item: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, body, rest = item[:open_at], item[open_at + 1:close_at], item[close_at + 1:]
    tails = _expand_one(rest) if rest else [""]
    out: list[str] = []
    for piece in body.split(","):
        match = _RANGE.match(piece.strip())
        if not match:
            raise ValueError(f"bad range {piece!r} in host list {item!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low) or (int(high) - int(low)) * len(tails) + len(out) > _MAX_HOSTS:
            raise ValueError(f"range {piece!r} in host list {item!r} is reversed or too large")
        width = len(low)
        for number in range(int(low), int(high) + 1):
            out += [f"{prefix}{number:0{width}d}{tail}" for tail in tails]
    return out


def expand(hostlist: str) -> list[str]:
    """``gpu-[1-2],cpu-01`` -> ``['gpu-1', 'gpu-2', 'cpu-01']``; raises ValueError on a malformed list."""
    names: list[str] = []
    for item in _split_top(hostlist or ""):
        names += _expand_one(item)
    return names
