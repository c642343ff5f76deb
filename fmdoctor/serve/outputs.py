"""Where a result goes: a Slack thread, a JSON webhook, an SNS topic. Each raises on failure, so the message
stays on the queue and is retried (only the outputs that failed: see ``state.Ledger``).

Everything sent is redacted first (the assistant's secret patterns, plus ``agent.redact``; account ids are
kept, the people reading are the account's own), every field: Slack's top-level ``text`` (what notifications
show) and the resolved message are escaped as the blocks are, the SNS ``Subject`` is redacted as its message.
Slack gets the result as Block Kit built with
``fmdoctor.slack.blocks`` (the Runbook and Fix buttons of every front end: a Fix click opens the confirm dialog
of ``fmdoctor slack serve``, which only configured approvers get past). A repeat of the same alarm within
``serve.repeat_window`` is answered in the first one's thread, and that first message is updated to the latest
state, instead of a new message in the channel.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from fmdoctor.serve.investigate import Result

log = logging.getLogger(__name__)
Redact = Callable[[str], str]


def redactor(extra: Iterable[str] = ()) -> Redact:
    """The one redaction policy's secret patterns (not its account-id ones) and the configured extra regexes."""
    from fmdoctor.safety.redact import secrets_redactor

    return secrets_redactor(extra)


def redact_tree(value: Any, redact: Redact) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [redact_tree(v, redact) for v in value]
    if isinstance(value, dict):
        return {k: redact_tree(v, redact) for k, v in value.items()}
    return value


class SlackOutput:
    name = "slack"

    def __init__(self, client: Any, channel: str, redact: Redact, window_s: float = 6 * 3600, max_blocks: int = 40,
                 clock: Callable[[], float] = time.monotonic, shared: Any = None):
        self.client, self.channel, self.redact = client, channel, redact
        self.window_s, self.max_blocks, self.clock = window_s, max_blocks, clock
        self.shared = shared  # the replicas' dedupe table (SharedLedger): threads opened by any replica
        self._threads: OrderedDict[str, tuple[float, str]] = OrderedDict()  # repeat key -> (first post, ts)
        self._lock = threading.Lock()

    def thread_of(self, repeat_key: str) -> str | None:
        with self._lock:
            entry = self._threads.get(repeat_key)
            if entry and self.clock() - entry[0] <= self.window_s:
                return entry[1]
        return self.shared.thread_of(repeat_key, self.window_s) if self.shared is not None else None

    def send(self, result: Result) -> None:
        thread = self.thread_of(result.event.repeat_key)
        summary = redact_tree(summary_message(result, self.max_blocks, self.redact), self.redact)
        if thread is None:
            response = self.client.chat_postMessage(channel=self.channel, unfurl_links=False, **summary)
            thread = response["ts"]
            with self._lock:
                self._threads[result.event.repeat_key] = (self.clock(), thread)
                while len(self._threads) > 10_000:
                    self._threads.popitem(last=False)
            if self.shared is not None:
                try:
                    self.shared.remember_thread(result.event.repeat_key, thread, self.window_s)
                except Exception as exc:  # posted already: a repeat on another replica opens its own message
                    log.warning("could not share the Slack thread of %s: %s", result.event.title[:120],
                                type(exc).__name__)
        else:  # the same alarm again: the first message shows the latest state, the thread tells the story
            self.client.chat_update(channel=self.channel, ts=thread, **summary)
            self.client.chat_postMessage(channel=self.channel, thread_ts=thread, unfurl_links=False, **summary)
        if result.report is not None and result.event.firing:
            from fmdoctor.slack import blocks

            title = "*Everything the checks found*"
            for message in blocks.report_messages(result.report, self.max_blocks, title=title):
                self.client.chat_postMessage(channel=self.channel, thread_ts=thread, unfurl_links=False,
                                             **redact_tree(message, self.redact))

    def send_resolved(self, result_event_title: str, repeat_key: str) -> bool:
        """Tell the alarm's thread it resolved; False when there is no thread to tell (nothing posted)."""
        thread = self.thread_of(repeat_key)
        if thread is None:
            return False
        from fmdoctor.slack import blocks

        text = f":white_check_mark: resolved: {blocks.escape(self.redact(result_event_title))}"
        self.client.chat_postMessage(channel=self.channel, thread_ts=thread, text=text, blocks=[blocks.section(text)])
        return True


def summary_message(result: Result, max_blocks: int, redact: Redact = str) -> dict[str, Any]:
    """What fired, the narrative, the most likely cause with its Runbook/Fix buttons. Each text is redacted
    whole before it is cut to fit or split into sections: a secret cut in two no longer matches its pattern."""
    from fmdoctor.slack import blocks

    event = result.event
    title, cluster, detail = redact(event.title), redact(result.cluster), redact(event.detail or "")
    icon = blocks.STATUS_ICON.get(result.status, ":white_circle:")
    head = f"{icon} *{blocks.escape(title)}* · cluster *{blocks.escape(cluster)}* · *{result.status.upper()}*"
    when = f"{event.time:%Y-%m-%d %H:%M} UTC · " if event.time else ""
    items = [blocks.section(head),
             blocks.context(f"{when}{blocks.escape(redact(event.kind))} from {blocks.escape(redact(event.source))}"
                            f"{' · ' + blocks.escape(detail[:280]) if detail else ''}")]
    items += [blocks.section(piece) for piece in blocks.chunks(blocks.escape(redact(result.narrative)))]
    if result.cause is not None:
        items.append(blocks.section("*Most likely cause*"))
        items += blocks.finding_blocks(result.cause, result.cluster, 0)
    if result.incident is not None and result.report is not None:
        incident = result.incident
        facts = [incident.when(result.report.generated_at), incident.impact.words()]
        if len(incident.findings) > 1:
            facts.append(f"{len(incident.findings)} findings share this cause")
        facts.append(f"next: `{incident.next_words()}`")
        items.append(blocks.context(blocks.escape(" · ".join(f for f in facts if f))))
    # The top-level text is what notifications show: escaped like every block (a title saying <!channel> is text).
    text = f"fmdoctor: {blocks.escape(title)} ({blocks.escape(cluster)}: {result.status})"
    return {"text": text, "blocks": items[: max_blocks]}


class WebhookOutput:
    """POST the result as JSON through the one outbound client (``fmdoctor.engine.outbound``): a redirect is a
    failed delivery (retried), and the bearer token never goes to another origin. Every delivery carries the
    event id as its idempotency key (``Idempotency-Key`` header and ``idempotency_key`` in the body): deliveries
    are at least once, and a receiver that keeps the keys it saw drops the copy a crash mid-send can cause."""

    name = "webhook"
    KEY_HEADER = "Idempotency-Key"

    def __init__(self, url: str, redact: Redact, token: str | None = None, timeout_s: float = 10.0):
        self.url, self.redact, self.token, self.timeout_s = url, redact, token, timeout_s

    def send(self, result: Result) -> None:
        from fmdoctor.engine import outbound

        key = result.event.id
        header_key = key if key.isascii() and key.isprintable() else quote(key, safe="")
        data = {"idempotency_key": key, **redact_tree(result.to_json(), self.redact)}
        body = json.dumps(data, default=str).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "fmdoctor-serve", self.KEY_HEADER: header_key}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = outbound.request(self.url, data=body, headers=headers, method="POST")
        with outbound.urlopen(request, timeout=self.timeout_s) as response:
            if not 200 <= response.status < 300:
                raise RuntimeError(f"webhook answered HTTP {response.status}")


class SnsOutput:
    name = "sns"
    MAX_BYTES = 256 * 1024  # SNS's message size limit

    def __init__(self, client: Any, topic_arn: str, redact: Redact):
        self.client, self.topic_arn, self.redact = client, topic_arn, redact

    def send(self, result: Result) -> None:
        data = redact_tree(result.to_json(), self.redact)
        message = json.dumps(data, default=str)
        if len(message.encode()) > self.MAX_BYTES:  # the full report does not fit: send the result without it
            data["report"] = None
            data["truncated"] = "report left out: over SNS's 256 KiB limit"
            message = json.dumps(data, default=str)
        title = self.redact(result.event.title)  # redacted like the message; SNS subjects are printable ASCII
        subject = "".join(c for c in f"fmdoctor: {title}" if c.isascii() and c.isprintable())[:100]
        self.client.publish(TopicArn=self.topic_arn, Message=message, Subject=subject)
