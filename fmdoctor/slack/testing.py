"""A loopback fake of Slack's Web API, request signing and Block Kit readers, for tests and local trials.

:class:`FakeSlack` is a threaded ``http.server`` on 127.0.0.1 (as slack-bolt's own tests use a mock web API
server) that answers like Slack and records every call by method (``chat.postMessage``, ``chat.update``,
``views.open``, ``views.update``, ``chat.postEphemeral``, ``auth.test``, ``usergroups.users.list``) and
every post to a ``response_url`` (``/response/...``). Point a WebClient (or ``SLACK_API_URL``) at
:attr:`FakeSlack.api_url`. :func:`sign` computes Slack's v0 request signature.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from fmdoctor.loopback import serve_in_background

BOT_TOKEN = "xoxb-1111-2222-fmdoctortesttoken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "CDEMO0001"
APPROVER = "UAPPROVER1"
GROUP = "SOPSGROUP1"
GROUP_MEMBER = "UGROUPMEM1"
STRANGER = "USTRANGER1"


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    reply: dict[str, Any] | None = None


class FakeSlack(ThreadingHTTPServer):
    """Slack's Web API on 127.0.0.1: answers like Slack, records like a test needs."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FakeHandler)
        self.calls: list[Call] = []
        self.group_members: dict[str, list[str]] = {GROUP: [GROUP_MEMBER]}
        self.failures: dict[str, str] = {}  # method -> Slack error code to answer with
        self._ts = itertools.count(1)
        self._changed = threading.Condition()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def api_url(self) -> str:
        return self.url + "/api/"

    def record(self, method: str, params: dict[str, Any], reply: dict[str, Any] | None = None) -> None:
        with self._changed:
            self.calls.append(Call(method, params, reply))
            self._changed.notify_all()

    def replies(self, method: str) -> list[dict[str, Any]]:
        with self._changed:
            return [c.reply or {} for c in self.calls if c.method == method]

    def of(self, method: str) -> list[dict[str, Any]]:
        with self._changed:
            return [c.params for c in self.calls if c.method == method]

    def wait_for(self, method: str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len([c for c in self.calls if c.method == method]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [c.method for c in self.calls]
                    raise AssertionError(f"waited {timeout}s for {count} {method} call(s); saw {seen}")
                self._changed.wait(left)
            return [c.params for c in self.calls if c.method == method]

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method in self.failures:
            return {"ok": False, "error": self.failures[method]}
        ts = f"1700000000.{next(self._ts):06d}"
        if method == "auth.test":
            return {"ok": True, "url": "https://fake.slack.com/", "team": "fake", "user": "fmdoctor",
                    "team_id": "T0FAKE", "user_id": "UBOT00001", "bot_id": "B0FAKE"}
        if method in ("chat.postMessage", "chat.update"):
            return {"ok": True, "channel": params.get("channel"), "ts": params.get("ts") or ts,
                    "message": {"text": params.get("text"), "ts": ts}}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": ts}
        if method in ("views.open", "views.update"):
            return {"ok": True, "view": {"id": params.get("view_id") or f"V{ts[-6:]}", "hash": ts}}
        if method == "usergroups.users.list":
            group = params.get("usergroup")
            if group not in self.group_members:
                return {"ok": False, "error": "no_such_subteam"}
            return {"ok": True, "users": self.group_members[group]}
        return {"ok": True}


class _FakeHandler(BaseHTTPRequestHandler):
    server: FakeSlack

    def do_GET(self) -> None:  # noqa: N802 (usergroups.users.list is a GET)
        path, _, query = self.path.partition("?")
        self._handle(path, {k: v[0] for k, v in parse_qs(query).items()})

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        if "json" in (self.headers.get("Content-Type") or ""):
            params = json.loads(raw or "{}")
        else:
            params = {k: v[0] for k, v in parse_qs(raw).items()}
        path, _, query = self.path.partition("?")
        self._handle(path, {**{k: v[0] for k, v in parse_qs(query).items()}, **params})

    def _handle(self, path: str, params: dict[str, Any]) -> None:
        self.path = path
        if self.path.startswith("/response/"):
            self.server.record("response_url", {**params, "path": self.path})
            self._reply({"ok": True})
            return
        method = self.path.removeprefix("/api/")
        reply = self.server.answer(method, params)
        self.server.record(method, params, reply)
        self._reply(reply)

    def _reply(self, data: dict[str, Any]) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def sign(body: str, timestamp: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    """Slack's v0 request signature: HMAC-SHA256 over 'v0:{timestamp}:{body}' with the signing secret."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def buttons(messages: list[dict[str, Any]], action_id: str | None = None) -> list[dict[str, Any]]:
    """Every button in the posted messages (optionally only one action id)."""
    found = []
    for message in messages:
        for block in message.get("blocks") or []:
            if block.get("type") == "actions":
                found += [e for e in block["elements"] if action_id in (None, e.get("action_id"))]
    return found


def texts(message: dict[str, Any]) -> str:
    parts = [message.get("text") or ""]
    for block in message.get("blocks") or []:
        if "text" in block and isinstance(block["text"], dict):
            parts.append(block["text"]["text"])
        parts += [e.get("text", "") for e in block.get("elements", []) if isinstance(e.get("text"), str)]
    return "\n".join(parts)


def start_fake_slack() -> FakeSlack:
    server = FakeSlack()
    serve_in_background(server, name="fake-slack")
    return server
