"""Untrusted text shown to people, fed to models, or written as JSON.

Three destinations, three rules, one notion of what is dangerous:

- *control characters* (C0 but newline and tab, DEL, C1): an ESC starts a terminal escape sequence that can
  recolour, retitle, hide or rewrite what is on screen; CR and backspace overwrite it.
- *hidden characters*: zero-width, bidi embeddings/overrides/isolates, Unicode tag characters (invisible ASCII
  look-alikes), variation selectors, soft hyphen, line/paragraph separators and every other format character.
  A person cannot see them; a bidi override makes text read differently from what it is (Trojan Source).

:func:`visible` (people: terminal, Markdown, Slack, the TUI) writes both as escapes (``\\x1b``, ``\\u202e``),
so a person sees that they are there and what they are. :func:`strip_invisible` (models) removes them, with
whole ANSI sequences. :func:`dumps_json` keeps the data exact and escapes them in the JSON text.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

# Hidden whatever their Unicode category: tag characters, variation selectors, and the zero-width and bidi
# characters of the Trojan Source attacks. Every other format (Cf) character is hidden too (see _hidden).
_HIDDEN_RANGES = (
    (0xE0000, 0xE007F),  # tag characters
    (0xFE00, 0xFE0F),  # variation selectors
    (0xE0100, 0xE01EF),  # variation selectors supplement
    (0x200B, 0x200F),  # zero-width space/non-joiner/joiner, LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates
    (0xFEFF, 0xFEFF),  # zero-width no-break space (BOM)
    (0x180E, 0x180E),  # Mongolian vowel separator
    (0x061C, 0x061C),  # Arabic letter mark
    (0x00AD, 0x00AD),  # soft hyphen
    (0x115F, 0x1160),  # Hangul fillers (render as nothing)
    (0x3164, 0x3164),
    (0xFFA0, 0xFFA0),
)
ANSI_SEQUENCE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
# Candidates only (anything but printable ASCII); each is then classified, so plain text costs one scan.
_SUSPECT = re.compile(r"[^\x20-\x7e]")


def hidden(char: str) -> bool:
    """A character a person cannot see (or that reorders what they see)."""
    code = ord(char)
    if any(low <= code <= high for low, high in _HIDDEN_RANGES):
        return True
    return unicodedata.category(char) in ("Cf", "Zl", "Zp", "Cs")  # Cs: a lone surrogate cannot even be printed


def control(char: str) -> bool:
    """C0 (including newline and tab: callers decide about those), DEL and C1."""
    return unicodedata.category(char) == "Cc"


def escape_char(char: str) -> str:
    """``\\x1b``, ``\\u202e``, ``\\U000e0041``: the character's code, readable and inert everywhere."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: Any, lines: bool = True) -> str:
    """``text`` for a person: control and hidden characters written as escapes, the rest unchanged.

    ``lines``: keep newlines and tabs (a multi-line body); without it they are escaped too, for a value that
    must stay on its line (a resource in a table row, a header)."""
    text = text if isinstance(text, str) else str(text)
    if text.isascii() and text.isprintable():
        return text
    if lines:
        text = text.replace("\r\n", "\n")

    def one(match: re.Match[str]) -> str:
        char = match.group(0)
        if lines and char in "\n\t":
            return char
        return escape_char(char) if control(char) or hidden(char) else char

    return _SUSPECT.sub(one, text)


def strip_invisible(text: str) -> str:
    """``text`` for a model: escape sequences, control and hidden characters removed (newlines and tabs kept)."""
    if text.isascii() and text.isprintable():
        return text
    text = ANSI_SEQUENCE.sub("", text).replace("\r\n", "\n")
    return _SUSPECT.sub(lambda m: m.group(0) if m.group(0) in "\n\t" or not (control(m.group(0)) or
                                                                              hidden(m.group(0))) else "", text)


def _json_escape(match: re.Match[str]) -> str:
    char = match.group(0)
    if char in "\n\t" or not (control(char) or hidden(char)):  # json's own indentation; inside strings it escapes
        return char
    encoded = char.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{int.from_bytes(encoded[i:i + 2], 'big'):04x}" for i in range(0, len(encoded), 2))


def dumps_json(value: Any, **kwargs: Any) -> str:
    """JSON for machines and people alike: exact (it parses back to the same strings), Unicode kept readable,
    and control or hidden characters written as ``\\uXXXX`` escapes, never raw."""
    kwargs.setdefault("ensure_ascii", False)
    text = json.dumps(value, **kwargs)
    if text.isascii():  # json escapes C0 itself; only DEL can remain
        return text.replace("\x7f", "\\u007f")
    return _SUSPECT.sub(_json_escape, text)
