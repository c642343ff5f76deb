"""What stands between cluster data and a language model (OWASP LLM01 prompt injection, LLM02 sensitive
information disclosure, LLM05 improper output handling).

- :class:`Redactor` (:mod:`fmdoctor.safety.redact`, the policy for everything sent to a model or a chat):
  secrets and account-specific identifiers out of anything sent to a remote model.
- :func:`strip_invisible` (:mod:`fmdoctor.safety.text`): characters a person cannot see but a model reads
  (Unicode tag characters, variation selectors, zero-width and bidi controls) and terminal control sequences.
- :func:`delimit`: tool output wrapped as data between markers carrying a per-call nonce, so text inside
  cannot close the block and pose as instructions.
"""

from __future__ import annotations

import re
import secrets
import string

# The policies themselves are shared with every front end (MCP, Slack, reports); the assistant uses them here.
from fmdoctor.safety.redact import Pattern, Redactor
from fmdoctor.safety.text import strip_invisible

__all__ = ["Pattern", "Redactor", "clean_output", "delimit", "strip_invisible", "undelimit"]


OPEN_TAG = "<tool_output"
CLOSE_TAG = "</tool_output"


def delimit(tool: str, body: str, nonce: str | None = None) -> str:
    """Wrap tool output as data. The markers carry a random nonce that text inside cannot know, and any
    marker-like text inside is defused, so the block cannot be closed early by what a resource tag says."""
    nonce = nonce or _new_nonce()
    _ISSUED[nonce] = None
    while len(_ISSUED) > MAX_ISSUED:
        _ISSUED.pop(next(iter(_ISSUED)), None)
    body = body.replace(CLOSE_TAG, "<\\/tool_output").replace(OPEN_TAG, "<\\tool_output")
    return f'{OPEN_TAG} tool="{tool}" nonce="{nonce}">\n{body}\n{CLOSE_TAG} nonce="{nonce}">'


def _new_nonce() -> str:
    """Twelve random lowercase letters (about 56 bits). Letters only: the redactor runs over whole messages,
    markers included, and a hex nonce that came out as twelve digits was taken for an AWS account id and
    replaced, which broke the block's closing marker about once in 280 blocks."""
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(12))


def undelimit(content: str) -> str:
    """The body of a :func:`delimit` block (the whole text when it is not one)."""
    match = re.match(r'\s*<tool_output tool="[^"]*" nonce="([0-9a-z]+)">\n(.*)\n</tool_output nonce="\1">\s*$',
                     content, re.S)
    return match.group(2) if match else content


def without_data(text: str) -> str:
    """``text`` less its :func:`delimit` blocks: the words a person wrote, not the data quoted with them (an alert
    that ``serve`` hands the assistant with its question). Only blocks this process delimited: a block a person
    typed into a question (with a nonce of their own) is their words, so it cannot hide them from the cluster
    guard."""
    return re.sub(r'<tool_output tool="[^"]*" nonce="([0-9a-z]+)">\n.*?\n</tool_output nonce="\1">',
                  lambda m: " " if m.group(1) in _ISSUED else m.group(0), text, flags=re.S)


# The nonces :func:`delimit` gave out, the latest MAX_ISSUED (a block is read in the turn it is made for).
MAX_ISSUED = 4096
_ISSUED: dict[str, None] = {}


def clean_output(text: str) -> str:
    """Model output before it reaches a terminal, Slack or a file: no escape sequences or invisible text."""
    return strip_invisible(text).strip()
