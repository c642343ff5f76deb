"""``/fmdoctor`` text -> a typed command. Slack hands us one string; we parse it like a tiny CLI.

    /fmdoctor check CLUSTER [--only ID[,ID]]
    /fmdoctor why-not CLUSTER --from SRC --to DST [--port P] [--protocol tcp|udp|icmp|all]
    /fmdoctor help

CLUSTER may be left out when the channel is allowed exactly one cluster. Mentions take the same words
(``@fmdoctor check llm-train``); anything else in a mention is a question for the assistant.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from fmdoctor.engine.errors import UsageError
from fmdoctor.net.reachability import PROTOCOLS

USAGE = ("usage: `/fmdoctor check CLUSTER [--only ID[,ID]]`, "
         "`/fmdoctor why-not CLUSTER --from SRC --to DST [--port P] [--protocol tcp|udp|icmp|all]`, "
         "or mention @fmdoctor with a question")
VERBS = ("check", "why-not", "help")
_FLAGS = {"check": {"--only"}, "why-not": {"--from", "--to", "--port", "--protocol"}}


@dataclass(frozen=True)
class Command:
    verb: str  # check | why-not | help
    cluster: str | None = None
    only: tuple[str, ...] = ()
    source: str | None = None
    destination: str | None = None
    port: str | None = None
    protocol: str = "tcp"
    options: dict[str, str] = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        if self.verb == "why-not":
            port = f" port {self.port}" if self.port else ""
            return f"why-not {self.source} -> {self.destination} ({self.protocol}{port}) on {self.cluster}"
        only = f" --only {','.join(self.only)}" if self.only else ""
        return f"check {self.cluster}{only}"


def is_command(text: str) -> bool:
    """Whether a mention's text starts with a command verb (else it is a question)."""
    first = text.strip().split(maxsplit=1)
    return bool(first) and first[0].lower() in VERBS


def parse_command(text: str) -> Command:
    """Parse ``text`` (without the ``/fmdoctor`` itself); bad input raises :class:`UsageError` with the usage."""
    try:
        words = shlex.split(text.replace("\u201c", '"').replace("\u201d", '"'))  # Slack's smart quotes
    except ValueError as exc:
        raise UsageError(f"cannot read the command: {exc}", hint=USAGE) from None
    if not words or words[0].lower() == "help":
        return Command("help")
    verb = words[0].lower()
    if verb not in _FLAGS:
        raise UsageError(f"unknown command {words[0]!r}", hint=USAGE)
    cluster, options = _split(verb, words[1:])
    if verb == "check":
        only = tuple(i.strip() for i in options.get("--only", "").split(",") if i.strip())
        return Command("check", cluster, only=only, options=options)
    missing = [f for f in ("--from", "--to") if f not in options]
    if missing:
        raise UsageError(f"why-not needs {' and '.join(missing)}", hint=USAGE)
    protocol = options.get("--protocol", "tcp").lower()
    if protocol not in PROTOCOLS:
        raise UsageError(f"unknown protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}", hint=USAGE)
    return Command("why-not", cluster, source=options["--from"], destination=options["--to"],
                   port=options.get("--port"), protocol=protocol, options=options)


def _split(verb: str, words: list[str]) -> tuple[str | None, dict[str, str]]:
    cluster: str | None = None
    options: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        name, eq, inline = word.partition("=")
        if name.startswith("--"):
            if name not in _FLAGS[verb]:
                raise UsageError(f"unknown option {name!r} for {verb}", hint=USAGE)
            if eq:
                options[name] = inline
            elif index + 1 < len(words):
                options[name] = words[index + 1]
                index += 1
            else:
                raise UsageError(f"{name} needs a value", hint=USAGE)
        elif cluster is None:
            cluster = word
        else:
            raise UsageError(f"unexpected {word!r}: one cluster per command", hint=USAGE)
        index += 1
    return cluster, options
