"""What stands between cluster data and a language model (OWASP LLM01 prompt injection, LLM02 sensitive
information disclosure, LLM05 improper output handling).

- :class:`Redactor`: secrets and account-specific identifiers out of anything sent to a remote model.
- :func:`strip_invisible`: characters a person cannot see but a model reads (Unicode tag characters,
  variation selectors, zero-width and bidi controls) and terminal control sequences.
- :func:`delimit`: tool output wrapped as data between markers carrying a per-call nonce, so text inside
  cannot close the block and pose as instructions.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# Ranges stripped whatever their Unicode category: tag characters (invisible ASCII look-alikes used to
# smuggle instructions), variation selectors, and the zero-width/bidi characters of the Trojan Source attacks.
_INVISIBLE_RANGES = (
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
)
_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
_KEEP_CONTROLS = {"\n", "\t"}


def _invisible(char: str) -> bool:
    code = ord(char)
    if any(low <= code <= high for low, high in _INVISIBLE_RANGES):
        return True
    category = unicodedata.category(char)
    if category == "Cf":  # every other "format" character is invisible too
        return True
    return category == "Cc" and char not in _KEEP_CONTROLS


def strip_invisible(text: str) -> str:
    """Remove invisible and control characters (and ANSI escape sequences); keeps newlines and tabs."""
    text = _ANSI.sub("", text)
    if text.isascii() and text.isprintable():
        return text
    return "".join(c for c in text.replace("\r\n", "\n") if not _invisible(c))


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: re.Pattern[str]
    group: int = 0  # which group to replace (0 = the whole match)


_BUILTIN = (
    Pattern("private-key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S)),
    Pattern("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[A-Z0-9]{16}\b")),
    Pattern("aws-secret", re.compile(
        r"(?i)(?:aws_?secret_?access_?key|secret_?access_?key|secretkey)[\"'\s:=]+([A-Za-z0-9/+=]{40})\b"), 1),
    Pattern("aws-session-token", re.compile(
        r"(?i)(?:aws_?session_?token|x-amz-security-token|sessiontoken)[\"'\s:=]+([A-Za-z0-9/+=]{40,})"), 1),
    Pattern("bearer-token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})"), 1),
    Pattern("slack-token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    Pattern("github-token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    Pattern("api-key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}")),
    Pattern("password", re.compile(
        r"(?i)\b(?:password|passwd|pwd|secret|token)[\"'\s]*[:=][\"'\s]*([^\s\"',}]{6,})"), 1),
    # Account ids: inside ARNs, in AWS service URLs (SQS queues), and after account/owner keys.
    Pattern("account-id", re.compile(r"\barn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:(\d{12}):"), 1),
    Pattern("account-id", re.compile(r"\.amazonaws\.com(?:\.cn)?/(\d{12})/"), 1),
    Pattern("account-id", re.compile(r"(?i)(?:account|owner)(?:_?id)?[\"'\s:=]+(\d{12})\b"), 1),
)


class Redactor:
    """Replaces secrets with ``[REDACTED:kind]``. Built-in patterns plus the configured ``agent.redact``."""

    def __init__(self, extra: Iterable[str] = ()):
        self.patterns = list(_BUILTIN)
        for raw in extra:
            self.patterns.append(Pattern("configured", re.compile(raw)))

    def __call__(self, text: str) -> str:
        for pattern in self.patterns:
            text = _replace(pattern, text)
        return text


def _replace(pattern: Pattern, text: str) -> str:
    marker = f"[REDACTED:{pattern.name}]"
    if pattern.group == 0:
        return pattern.regex.sub(marker, text)

    def one(match: re.Match[str]) -> str:
        start, end = match.span(pattern.group)
        whole_start = match.start()
        value = match.group(0)
        return value[: start - whole_start] + marker + value[end - whole_start:]

    return pattern.regex.sub(one, text)


OPEN_TAG = "<tool_output"
CLOSE_TAG = "</tool_output"


def delimit(tool: str, body: str, nonce: str | None = None) -> str:
    """Wrap tool output as data. The markers carry a random nonce that text inside cannot know, and any
    marker-like text inside is defused, so the block cannot be closed early by what a resource tag says."""
    nonce = nonce or secrets.token_hex(6)
    body = body.replace(CLOSE_TAG, "<\\/tool_output").replace(OPEN_TAG, "<\\tool_output")
    return f'{OPEN_TAG} tool="{tool}" nonce="{nonce}">\n{body}\n{CLOSE_TAG} nonce="{nonce}">'


def undelimit(content: str) -> str:
    """The body of a :func:`delimit` block (the whole text when it is not one)."""
    match = re.match(r'\s*<tool_output tool="[^"]*" nonce="([0-9a-f]+)">\n(.*)\n</tool_output nonce="\1">\s*$',
                     content, re.S)
    return match.group(2) if match else content


def clean_output(text: str) -> str:
    """Model output before it reaches a terminal, Slack or a file: no escape sequences or invisible text."""
    return strip_invisible(text).strip()
