"""The slack-bolt app: listeners for ``/fmdoctor``, mentions, and the Runbook/Fix buttons and dialog.

Each listener acknowledges at once (Slack allows 3 seconds), in the thread that received the request
(``process_before_response``), and does its work in a bolt *lazy* listener on a pool of its own
(``WORKERS``), then posts where the request came from: an ack never waits behind running checks. Errors
become a message in Slack, never a traceback. Everything sent is redacted (:mod:`fmdoctor.slack.outbound`).
Requests are verified with the signing secret by bolt (v0 HMAC-SHA256, 5-minute window) before any
listener or the event de-duplication sees them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.slack import blocks
from fmdoctor.slack.auth import NotAllowed, pick_cluster
from fmdoctor.slack.commands import USAGE, is_command, parse_command
from fmdoctor.slack.dedupe import SeenEvents, dedupe_middleware
from fmdoctor.slack.fixes import FixFlow
from fmdoctor.slack.outbound import redacted_reply
from fmdoctor.slack.service import SlackService, Where
from fmdoctor.slack.tokens import RedactSecrets, SlackTokens

log = logging.getLogger(__name__)
SLASH_COMMAND = "/fmdoctor"
WORKERS = 8  # checks, questions and fixes running at once; acks do not use this pool
_MENTION = re.compile(r"<@[A-Z0-9]+(\|[^>]*)?>")


def web_client(tokens: SlackTokens, logger: logging.Logger | None = None) -> WebClient:
    """The bot's Web API client, at ``SLACK_API_URL`` when set (a proxy, or a test's fake server)."""
    return WebClient(token=tokens.bot_token, base_url=tokens.api_url, logger=logger)


def build_app(service: SlackService, tokens: SlackTokens, seen: SeenEvents | None = None,
              token_verification: bool = True) -> App:
    logger = logging.getLogger("fmdoctor.slack.bolt")
    logger.addFilter(RedactSecrets(tokens.secrets()))
    app = App(client=service.client, signing_secret=tokens.signing_secret or "", logger=logger,
              token_verification_enabled=token_verification, name="fmdoctor", process_before_response=True,
              listener_executor=ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="fmdoctor-slack-work"))
    app.middleware(dedupe_middleware(seen or SeenEvents()))
    fixes = FixFlow(service)

    def ack_command(ack: Callable[..., Any], command: dict[str, Any]) -> None:
        ack = redacted_reply(ack, service.redactor)
        try:
            parsed = service.resolve(parse_command(command.get("text", "")), command.get("channel_id"))
        except FmdoctorError as exc:
            ack(text=_error_text(exc))
            return
        if parsed.verb == "help":  # `/fmdoctor help` and a bare `/fmdoctor`: the answer is the ack itself
            ack(text=USAGE, response_type="ephemeral")
            return
        ack(text=f":hourglass_flowing_sand: running `{blocks.escape(parsed.describe())}`…")

    def run_command(command: dict[str, Any], respond: Callable[..., Any]) -> None:
        respond = redacted_reply(respond, service.redactor)
        where = Where(command["channel_id"])
        try:
            parsed = service.resolve(parse_command(command.get("text", "")), command.get("channel_id"))
        except FmdoctorError:
            return  # already answered in the ack
        if parsed.verb == "help":
            return  # answered in the ack
        messages = _guarded(service, where, lambda: service.run_command(parsed, where))
        if messages is None:
            return
        try:
            service.post(where, messages)
        except Exception as exc:  # not in the channel (a DM, a private channel): answer via response_url
            log.info("chat.postMessage to %s failed (%s); answering via response_url", where.channel,
                     type(exc).__name__)
            for message in messages:
                respond(**message, response_type="in_channel", replace_original=False)

    app.command(SLASH_COMMAND)(ack=ack_command, lazy=[run_command])

    def on_mention(event: dict[str, Any]) -> None:
        channel = event["channel"]
        where = Where(channel, event.get("thread_ts") or event.get("ts"))
        text = _MENTION.sub("", event.get("text", "")).strip()

        def work() -> list[blocks.Message]:
            if not text or is_command(text):
                return service.run_command(service.resolve(parse_command(text), channel), where)
            cluster, question = _cluster_and_question(service, channel, text)
            return service.answer(question, cluster, where)

        messages = _guarded(service, where, work)
        if messages:
            service.post(where, messages)

    app.event("app_mention")(ack=lambda ack: ack(), lazy=[on_mention])

    def show_runbook(body: dict[str, Any], respond: Callable[..., Any]) -> None:
        respond = redacted_reply(respond, service.redactor)
        value = json.loads(body["actions"][0]["value"])
        channel = (body.get("channel") or {}).get("id")
        try:
            cluster = pick_cluster(service.settings, channel, value.get("cluster"))
            messages = service.runbook_messages(cluster, value["finding"], value["runbook"])
        except FmdoctorError as exc:
            respond(text=_error_text(exc), response_type="ephemeral", replace_original=False)
            return
        for message in messages:
            respond(**message, response_type="ephemeral", replace_original=False)

    app.action(blocks.RUNBOOK_ACTION)(ack=lambda ack: ack(), lazy=[show_runbook])

    def open_fix(body: dict[str, Any]) -> None:
        _guarded(service, _where_of(body), lambda: fixes.open(body), private_to=body["user"]["id"])

    app.action(blocks.FIX_ACTION)(ack=lambda ack: ack(), lazy=[open_fix])

    def apply_fix(body: dict[str, Any]) -> None:
        meta = json.loads(body["view"].get("private_metadata") or "{}")
        where = Where(meta.get("channel") or "", meta.get("thread_ts"))
        _guarded(service, where, lambda: fixes.submit(body), private_to=body["user"]["id"])

    app.view(blocks.FIX_CALLBACK)(ack=lambda ack: ack(), lazy=[apply_fix])
    return app


def _cluster_and_question(service: SlackService, channel: str, text: str) -> tuple[str, str]:
    """``@fmdoctor llm-train: why is it slow?`` names the cluster; else the channel's only cluster."""
    first, _, rest = text.partition(" ")
    name = first.rstrip(":,")
    allowed = service.settings.clusters_for(channel)
    if rest.strip() and (name in allowed or (first.endswith(":") and "*" in allowed)):
        return pick_cluster(service.settings, channel, name), rest.strip()
    return pick_cluster(service.settings, channel, None), text


def _where_of(body: dict[str, Any]) -> Where:
    message = body.get("message") or {}
    return Where((body.get("channel") or {}).get("id") or "", message.get("thread_ts") or message.get("ts"))


def _error_text(exc: FmdoctorError) -> str:
    hint = f"\n_{blocks.escape(exc.hint)}_" if exc.hint else ""
    return f":x: {blocks.escape(exc.message)}{hint}"


def _guarded(service: SlackService, where: Where, work: Callable[[], Any], private_to: str | None = None) -> Any:
    """Run ``work``; a typed error is told in Slack (privately when ``private_to``), anything else is logged."""
    try:
        return work()
    except FmdoctorError as exc:
        if not where.channel:
            return None
        if private_to:
            service.client.chat_postEphemeral(channel=where.channel, user=private_to, text=_error_text(exc))
        else:
            service.say_error(where, exc)
    except Exception:
        log.exception("the Slack request failed")
        if where.channel:
            service.say_error(where, _Internal("fmdoctor failed on this request; see its log"))
    return None


class _Internal(FmdoctorError):
    pass


__all__ = ["NotAllowed", "SLASH_COMMAND", "build_app", "web_client"]
