"""One redaction policy for everything that leaves the process towards a model or a chat.

The assistant's model calls, MCP tool results (an MCP client forwards them to its own model), Slack messages
and any webhook sender apply :class:`Redactor` (``agent.redact`` adds patterns). It replaces secrets and
account-specific numbers with ``[REDACTED:kind]`` and keeps what answers cite: resource ids (``sg-...``,
``i-...``), names and ARNs' shape.

The patterns follow the issuers' documented formats: AWS access key ids (the ``AKIA``/``ASIA``... prefixes of
the IAM user guide's "Unique identifiers" table) and 40-character secret keys, also bare and inside JSON
quoted with ``\\"``; STS session tokens; Slack's ``xoxb-``/``xoxp-``/``xoxa-``/``xoxe-``/``xapp-`` tokens and
incoming-webhook URLs; GitHub's ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``/``github_pat_`` tokens; OpenAI
(``sk-``, ``sk-proj-``, ``sk-svcacct-``) and Anthropic (``sk-ant-api03-``) keys; PEM private keys (also cut
off before their END line); JWTs; bearer tokens, passwords in URLs and key/value pairs; 12-digit AWS
account ids (in ARNs, service URLs, ECR hosts, SageMaker's default bucket names, after an account or owner
key, and bare).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_SEP = r"""(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?"""  # key = value, "key": "value", and the same inside JSON (\")


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: re.Pattern[str]
    group: int = 0  # which group to replace (0 = the whole match)


def _p(name: str, pattern: str, group: int = 0, flags: int = 0) -> Pattern:
    return Pattern(name, re.compile(pattern, flags), group)


_BUILTIN = (
    _p("private-key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
       r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*\Z)", flags=re.S),
    _p("slack-webhook", r"https://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]+"),
    _p("slack-token", r"\bxox(?:[abposre]|e\.xox[bp])-[A-Za-z0-9-]{10,}"),
    _p("slack-token", r"\bxapp-\d+-[A-Za-z0-9-]{10,}"),
    _p("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    _p("api-key", r"\bsk-(?:proj-|svcacct-|admin-|ant-(?:api|admin|sid)\d\d-|ant-)?[A-Za-z0-9_-]{20,}"),
    _p("bearer-token", r"(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{16,})", 1),
    _p("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"),
    _p("aws-access-key-id", r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)"
       r"[A-Z0-9]{16}(?![A-Z0-9])"),
    _p("aws-session-token", r"(?i)(?:aws_?session_?token|x-amz-security-token|sessiontoken)" + _SEP
       + r"([A-Za-z0-9/+=]{40,})", 1),
    _p("aws-session-token", r"\b(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE)[A-Za-z0-9/+=]{20,}"),
    _p("aws-secret", r"(?i)(?:aws_?secret_?access_?key|secret_?access_?key|secretkey)" + _SEP
       + r"([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])", 1),
    # A bare secret key: exactly 40 base64 characters mixing upper, lower and a digit or symbol (a lowercase
    # hex digest, a word or an id does not qualify).
    _p("aws-secret", r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]{0,39}[A-Z])(?=[A-Za-z0-9/+]{0,39}[a-z])"
       r"(?=[A-Za-z0-9/+]{0,39}[0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
    _p("password", r"(?<=://)[^/\s:@]+:([^/\s@]+)(?=@)", 1),  # https://user:password@host
    _p("password", r"(?i)\b(?:password|passwd|pwd|secret|token|api_?key)(?:\\?[\"'])?\s*[:=]\s*(?:\\?[\"'])?"
       r"([^\s\"'\\,}]{6,})", 1),
    # Account ids: in ARNs, service URLs (SQS queues), ECR hosts, SageMaker's default buckets, after keys, bare.
    _p("account-id", r"\barn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:(\d{12}):", 1),
    _p("account-id", r"\.amazonaws\.com(?:\.cn)?/(\d{12})(?=/|\b)", 1),
    _p("account-id", r"\b(\d{12})\.dkr\.ecr\.", 1),
    _p("account-id", r"\bsagemaker-[a-z]{2}(?:-[a-z]+)+-\d-(\d{12})\b", 1),
    _p("account-id", r"(?i)(?:account|owner)(?:_?id)?" + _SEP + r"(\d{12})\b", 1),
    _p("account-id", r"(?<![\w.:/+@-])(?<!: )\d{12}(?![\w.])"),
)


class Redactor:
    """Replaces secrets with ``[REDACTED:kind]``. Built-in patterns plus configured ones (``agent.redact``)."""

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


DEFAULT = Redactor()


def redactor_for(settings: Any) -> Redactor:
    """The policy with the patterns these settings add (``agent.redact``): the same for every way out."""
    extra = tuple(getattr(getattr(settings, "agent", None), "redact", None) or ())
    return _with_extra(extra) if extra else DEFAULT


@functools.lru_cache(maxsize=8)
def _with_extra(extra: tuple[str, ...]) -> Redactor:
    return Redactor(extra)


def redact_data(value: Any, redactor: Redactor | None = None, keys: frozenset[str] | None = None) -> Any:
    """``value`` (JSON-shaped data) with every string redacted; numbers and booleans are left as they are.

    ``keys``: only strings under these keys (Slack's ``text`` fields, which people read) are redacted, so
    machine values travelling alongside (a button's ``value``, ids) still work."""
    redact = redactor or DEFAULT

    def walk(item: Any, redacting: bool) -> Any:
        if isinstance(item, str):
            return redact(item) if redacting else item
        if isinstance(item, dict):
            return {k: walk(v, keys is None or k in keys) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return type(item)(walk(v, redacting) for v in item)
        return item

    return walk(value, keys is None)


def secrets_redactor(extra: Iterable[str] = ()) -> Redactor:
    """The policy's secret patterns without its account-id ones (plus ``extra``): for text whose account ids
    are the point (``serve``'s events and results)."""
    policy = Redactor(extra)
    policy.patterns = [p for p in policy.patterns if p.name != "account-id"]
    return policy


SECRETS = secrets_redactor()
