"""Everything fmdoctor sends to Slack passes the one redaction policy (:mod:`fmdoctor.safety.redact`).

Slack is a chat other people read, copy into tickets and feed to their own assistants; a secret or account
id that a tag, an AWS message or the model put in a report leaves the process here. Three ways out, one rule:
Web API calls (``chat.postMessage``, ``chat.postEphemeral``, ``views.open``/``update``; :func:`redacting`
wraps the client's ``api_call``, which every method goes through), ``respond`` (the command's
``response_url``) and ``ack`` texts (:func:`redacted_reply`). Only what people read is redacted (``text``
fields and their kin): a button's ``value`` or a view's ``private_metadata`` carry ids fmdoctor reads back.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from fmdoctor.safety.redact import Redactor, redact_data

SHOWN_KEYS = frozenset({"text", "title", "alt_text", "fallback", "pretext", "placeholder"})
_WRAPPED = "_fmdoctor_redacting"


def redacted(payload: Any, redactor: Redactor | None = None) -> Any:
    return redact_data(payload, redactor, keys=SHOWN_KEYS)


def redacting(client: Any, redactor: Redactor | None = None) -> Any:
    """The same client, whose every Web API call is redacted first (idempotent; works on any WebClient).
    ``redactor``: the policy with the configured patterns (:func:`~fmdoctor.safety.redact.redactor_for`)."""
    if getattr(client, _WRAPPED, False) or not hasattr(client, "api_call"):
        return client
    api_call = client.api_call

    @wraps(api_call)
    def call(api_method: str, **kwargs: Any) -> Any:
        for part in ("json", "data", "params"):
            if isinstance(kwargs.get(part), dict):
                kwargs[part] = redacted(kwargs[part], redactor)
        return api_call(api_method, **kwargs)

    client.api_call = call
    setattr(client, _WRAPPED, True)
    return client


def redacted_reply(reply: Callable[..., Any], redactor: Redactor | None = None) -> Callable[..., Any]:
    """bolt's ``ack`` or ``respond``, redacting what it sends."""

    def send(*args: Any, **kwargs: Any) -> Any:
        args = tuple(redacted({"text": a}, redactor)["text"] if isinstance(a, str) else a for a in args)
        return reply(*args, **redacted(kwargs, redactor))

    return send
