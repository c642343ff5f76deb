"""Where each value of a rendered runbook lands, and how it is written there: the quoting policy.

The template renders every ``{{ ... }}`` as a token (:class:`Values`), not as text; this module then reads
the Markdown around each token and writes the value for that place, so the policy holds for every runbook,
built-in or the user's, whether or not its author remembered ``| sh``:

- in a command (a fenced ``sh``/``bash``/``shell``/``console`` block or one without a language, or an inline
  code span with more than the value in it): one shell word, quoted for the quoting state it stands in
  (:func:`fmdoctor.safety.shell.place`), or refused and marked ``⟨refused: why⟩`` when it cannot be what the
  command needs (:func:`fmdoctor.safety.shell.check_value`);
- shown as code (a span holding only the value, another fenced block): the value with control and hidden
  characters escaped, in a span wide enough that its backticks cannot close it;
- in prose: the same, on one line, with backticks escaped, so a value cannot open a code block of its own.
"""

from __future__ import annotations

import re
import secrets
import shlex
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.safety.shell import Refused, ShellScanner, place
from fmdoctor.safety.text import visible

SHELL_LANGUAGES = frozenset({"", "sh", "bash", "shell", "console", "zsh"})
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\s*\n).)+?)(?<!`)\1(?!`)", re.S)


class ShellVar(str):
    """A shell variable reference (``$AWS_REGION``) standing for a value fmdoctor does not know."""


class Command(str):
    """Words of a command fmdoctor itself writes (``fmdoctor fix --demo``), never a finding's value: placed as
    they are."""


class ShellWord:
    """A value the author asked to see shell-quoted (``| sh``), even in prose."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


@dataclass
class Values:
    """The values of one rendering, each standing in the text as an unguessable token until placed."""

    nonce: str = field(default_factory=lambda: secrets.token_hex(4))
    items: list[Any] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def token(self, value: Any) -> str:
        self.items.append(value)
        return f"\ue000{self.nonce}{len(self.items) - 1}\ue001"

    def pattern(self) -> re.Pattern[str]:
        return re.compile(f"\ue000{self.nonce}(\\d+)\ue001")

    def owns(self, text: str) -> bool:
        return f"\ue000{self.nonce}" in text


def place_values(text: str, values: Values, raw: type, placer: _Placer | None = None) -> str:
    """The rendered Markdown with every token replaced by its value, written for where it stands.

    ``raw``: values of this type (the template view's placeholders) are printed as they are."""
    placer = placer or _Placer(values, values.pattern(), raw)
    out: list[str] = []
    prose: list[str] = []
    block: list[str] | None = None
    fence = ("", False)
    for line in text.split("\n"):
        if block is None:
            opening = _FENCE.match(line)
            if opening:
                if prose:
                    out.append(placer.prose("\n".join(prose)))
                prose, block = [], []
                fence = (opening.group(1), opening.group(2).lower() in SHELL_LANGUAGES)
                out.append(placer.prose(line))
            else:
                prose.append(line)
        elif line.strip().startswith(fence[0]) and not line.strip().strip(fence[0][0]):
            out += [placer.block(block, fence[1]), line]
            block = None
        else:
            block.append(line)
    if block is not None:
        out.append(placer.block(block, fence[1]))
    if prose:
        out.append(placer.prose("\n".join(prose)))
    return "\n".join(out)


@dataclass
class _Placer:
    values: Values
    tokens: re.Pattern[str]
    raw: type

    def block(self, lines: list[str], shell: bool) -> str:
        text = "\n".join(lines)
        return self.command(text) if shell else self.tokens.sub(lambda m: self.shown(m, lines=False), text)

    def prose(self, text: str) -> str:
        pieces, last = [], 0
        for span in _SPAN.finditer(text):
            pieces.append(self._prose_text(text[last:span.start()]))
            pieces.append(self._span(span.group(1), span.group(2)))
            last = span.end()
        pieces.append(self._prose_text(text[last:]))
        return "".join(pieces)

    def _prose_text(self, text: str) -> str:
        return self.tokens.sub(lambda m: self.shown(m, lines=False).replace("`", "\\`"), text)

    def _span(self, ticks: str, content: str) -> str:
        if not self.tokens.search(content):
            return f"{ticks}{content}{ticks}"
        is_command = bool(self.tokens.sub("", content).strip())
        inner = self.command(content) if is_command else self.tokens.sub(lambda m: self.shown(m, False), content)
        longest = max((len(run) for run in re.findall(r"`+", inner)), default=0)
        if longest >= len(ticks):  # a value with backticks: widen the span so they cannot close it
            ticks = "`" * (longest + 1)
            inner = f" {inner} "
        return f"{ticks}{inner}{ticks}"

    def shown(self, match: re.Match[str], lines: bool = False) -> str:
        value = self.values.items[int(match.group(1))]
        if isinstance(value, self.raw | Command):
            return str(value)
        if isinstance(value, ShellWord):
            inner = value.value
            return str(inner) if isinstance(inner, self.raw | ShellVar) else visible(shlex.quote(_text(inner)), lines)
        return visible(_text(value), lines)

    def command(self, text: str) -> str:
        scanner = ShellScanner()
        out, last = [], 0
        for match in self.tokens.finditer(text):
            literal = text[last:match.start()]
            scanner.feed(literal)
            out += [literal, self._word(self.values.items[int(match.group(1))], scanner)]
            scanner.feed_value()
            last = match.end()
        out.append(text[last:])
        return "".join(out)

    def _word(self, value: Any, scanner: ShellScanner) -> str:
        value = value.value if isinstance(value, ShellWord) else value
        if isinstance(value, self.raw | Command):
            return str(value)
        if isinstance(value, ShellVar):  # expanded by the shell, as one word
            return {"unquoted": f'"{value}"', "single": f"'\"{value}\"'"}.get(scanner.state, str(value))
        if isinstance(value, list | tuple) and scanner.state == "unquoted":  # a list: one word per item
            return " ".join(self._placed(_text(item), scanner) for item in value) or "''"
        return self._placed(_text(value), scanner)

    def _placed(self, text: str, scanner: ShellScanner) -> str:
        """One value as one word; a value that cannot be one is refused in its own place, the others kept."""
        try:
            return place(text, scanner)
        except Refused as refused:
            self.values.refused.append(refused.reason)
            return f"⟨refused: {refused.reason}⟩"


_EXPRESSION = re.compile(r"{{-?(.*?)-?}}|{%.*?%}|{#.*?#}", re.S)
_SPACE_JOIN = re.compile(r"\|\s*join\(\s*(['\"])\s+\1\s*\)")


@dataclass
class _Expression:
    source: str
    line: int


class _Linter(_Placer):
    """Walks a runbook's source as the renderer walks its output, judging each ``{{ ... }}`` by its place."""

    problems: list[str]

    def _word(self, value: Any, scanner: ShellScanner) -> str:
        if isinstance(value, _Expression):
            if scanner.state == "heredoc":
                self.problems.append(f"line {value.line}: {{{{{value.source}}}}} is inside a here-document, where "
                                     "it cannot be quoted: pass the value as an argument instead")
            elif scanner.state == "unquoted" and _SPACE_JOIN.search(value.source):
                self.problems.append(f"line {value.line}: {{{{{value.source}}}}} joins a list into one shell word; "
                                     "write the list itself and each item becomes a word")
        return "x"


def lint_commands(body: str, first_line: int = 1) -> list[str]:
    """Problems with the values a runbook body places in commands (lines counted from ``first_line``)."""
    values = Values()

    def token(match: re.Match[str]) -> str:
        if match.group(1) is None:  # a tag or comment prints nothing; keep its line breaks
            return "\n" * match.group(0).count("\n")
        line = first_line + body.count("\n", 0, match.start())
        return values.token(_Expression(match.group(1), line))

    linter = _Linter(values, values.pattern(), type(None))
    linter.problems = []
    place_values(_EXPRESSION.sub(token, body), values, type(None), linter)
    return linter.problems


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(_text(v) for v in value)
    return value if isinstance(value, str) else str(value)
