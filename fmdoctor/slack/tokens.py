"""Slack credentials, read only from the environment, and a log filter that keeps them out of every log.

Tokens never go in ``fmdoctor.yaml`` (a config file gets committed, copied and pasted into tickets); the
process environment is where a secret store or Kubernetes secret puts them.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

from fmdoctor.engine.errors import ConfigError

BOT_TOKEN = "SLACK_BOT_TOKEN"
APP_TOKEN = "SLACK_APP_TOKEN"
SIGNING_SECRET = "SLACK_SIGNING_SECRET"
API_URL = "SLACK_API_URL"
DEFAULT_API_URL = "https://slack.com/api/"

_TOKEN = re.compile(r"\b(xox[abposr]|xapp)-[A-Za-z0-9-]+")


@dataclass(frozen=True)
class SlackTokens:
    bot_token: str = field(repr=False)
    app_token: str | None = field(default=None, repr=False)
    signing_secret: str | None = field(default=None, repr=False)
    api_url: str = DEFAULT_API_URL

    @classmethod
    def from_env(cls, mode: str | None = None) -> SlackTokens:
        """The tokens ``mode`` needs ('socket': an app token, 'http': the signing secret, None: the bot's only)."""
        bot = os.environ.get(BOT_TOKEN, "").strip()
        if not bot:
            raise ConfigError(f"{BOT_TOKEN} is not set",
                              hint="export the bot token (xoxb-...) from your Slack app's OAuth & Permissions page")
        app = os.environ.get(APP_TOKEN, "").strip() or None
        secret = os.environ.get(SIGNING_SECRET, "").strip() or None
        if mode == "socket" and not app:
            raise ConfigError(f"--mode socket needs {APP_TOKEN}",
                              hint="create an app-level token (xapp-...) with connections:write, or use --mode http")
        if mode == "http" and not secret:
            raise ConfigError(f"--mode http needs {SIGNING_SECRET}",
                              hint="copy it from the Slack app's Basic Information page; requests are verified with it")
        url = os.environ.get(API_URL, "").strip() or DEFAULT_API_URL
        return cls(bot, app, secret, url if url.endswith("/") else url + "/")

    def secrets(self) -> list[str]:
        return [s for s in (self.bot_token, self.app_token, self.signing_secret) if s]


class RedactSecrets(logging.Filter):
    """Replaces Slack tokens (any ``xox*-``/``xapp-``) and the given secrets in a record with ``[redacted]``."""

    def __init__(self, secrets: list[str] | None = None):
        super().__init__()
        self._secrets = [s for s in (secrets or []) if len(s) >= 6]

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return _TOKEN.sub("[redacted]", text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def install_redaction(tokens: SlackTokens, loggers: tuple[str, ...] = ("slack_bolt", "slack_sdk", "fmdoctor")) -> \
        RedactSecrets:
    """Attach the filter to the loggers Slack traffic goes through and to every root handler."""
    redactor = RedactSecrets(tokens.secrets())
    for name in loggers:
        logging.getLogger(name).addFilter(redactor)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)
    return redactor
