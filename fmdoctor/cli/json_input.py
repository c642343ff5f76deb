"""JSON given on the command line: inline, ``@FILE`` or ``-`` for stdin (so a check can be piped in)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fmdoctor.engine.errors import UsageError


def read_json_arg(value: str, flag: str, allow_inline: bool = True) -> Any:
    if value == "-":
        text, where = sys.stdin.read(), "stdin"
    elif value.startswith("@") or not allow_inline:
        path = Path(value[1:] if value.startswith("@") else value).expanduser()
        try:
            text, where = path.read_text(encoding="utf-8"), str(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{flag}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    else:
        text, where = value, "the argument"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag}: {where} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                         hint="pass a JSON string, @FILE, or - to read stdin") from None
