"""bench/RESULTS.md: each benchmark owns one section between its own markers and rewrites only that."""

from __future__ import annotations

from pathlib import Path

HEADER = ("# Benchmark results\n\nProduced by the scripts in bench/ on the development machine (2 shared CPU cores); "
          "re-run them to refresh a section.\n")


def write_section(path: Path, name: str, title: str, table: str) -> None:
    """Replace (or append) the section between ``<!-- name:start -->`` and ``<!-- name:end -->``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text() if path.exists() else HEADER
    section = f"{start}\n## {title}\n\n{table}{end}"
    if start in text:
        text = text[: text.index(start)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)
