"""Slack fixtures: the loopback fake Slack Web API, the demo world, and the app served over HTTP on 127.0.0.1.

Requests to the app are signed with the v0 scheme (:func:`fmdoctor.slack.testing.sign`); the app's
WebClient points at the fake with ``base_url``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_sdk import WebClient

from fmdoctor.config import SlackSettings
from fmdoctor.demo.runtime import demo_environment, demo_settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.slack.app import build_app
from fmdoctor.slack.server import EVENTS_PATH, SlackHTTPServer
from fmdoctor.slack.service import SlackService
from fmdoctor.slack.testing import (
    APPROVER,
    BOT_TOKEN,
    CHANNEL,
    GROUP,
    SIGNING_SECRET,
    FakeSlack,
    sign,
)
from fmdoctor.slack.tokens import SlackTokens


@pytest.fixture
def demo() -> Iterator[Any]:
    """The demo world in moto (in-process), and a Doctor over it."""
    with demo_environment() as world:
        doctor = Doctor(settings=demo_settings(world), connection=Connection(region=world.region))
        yield world, doctor


@dataclass
class Reply:
    status: int
    body: str
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


class SlackApp:
    """The fmdoctor bolt app over HTTP on 127.0.0.1, and helpers that send it what Slack sends."""

    def __init__(self, service: SlackService, server: SlackHTTPServer, fake: FakeSlack, cluster: str):
        self.service, self.server, self.fake, self.cluster = service, server, fake, cluster

    def post(self, body: str, content_type: str, headers: dict[str, str] | None = None,
             signed: bool = True) -> Reply:
        all_headers = {"Content-Type": content_type, **(sign(body) if signed else {}), **(headers or {})}
        request = urllib.request.Request(self.server.url + EVENTS_PATH, data=body.encode(), headers=all_headers,
                                         method="POST")
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return Reply(response.status, response.read().decode(), time.monotonic() - started)
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read().decode(), time.monotonic() - started)

    def command(self, text: str, user: str = APPROVER, channel: str = CHANNEL, **headers: str) -> Reply:
        form = {"command": "/fmdoctor", "text": text, "user_id": user, "channel_id": channel, "team_id": "T0FAKE",
                "trigger_id": "1.2.trig", "response_url": f"{self.fake.url}/response/cmd"}
        return self.post(urlencode(form), "application/x-www-form-urlencoded", headers)

    def event(self, event: dict[str, Any], event_id: str, headers: dict[str, str] | None = None) -> Reply:
        body = {"type": "event_callback", "team_id": "T0FAKE", "api_app_id": "A0FAKE", "event_id": event_id,
                "event_time": int(time.time()), "event": event}
        return self.post(json.dumps(body), "application/json", headers)

    def interactive(self, payload: dict[str, Any]) -> Reply:
        payload = {"team": {"id": "T0FAKE"}, "api_app_id": "A0FAKE", **payload}
        return self.post(urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded")

    def click(self, button: dict[str, Any], user: str, message_ts: str = "1700000000.000001") -> Reply:
        return self.interactive({
            "type": "block_actions", "user": {"id": user}, "channel": {"id": CHANNEL}, "trigger_id": "9.9.trig",
            "container": {"type": "message", "message_ts": message_ts, "channel_id": CHANNEL},
            "message": {"ts": message_ts, "text": "report"}, "response_url": f"{self.fake.url}/response/click",
            "actions": [{"type": "button", "action_id": button["action_id"], "block_id": "b",
                         "value": button["value"], "action_ts": "1700000001.1"}],
        })

    def submit(self, view: dict[str, Any], user: str) -> Reply:
        return self.interactive({"type": "view_submission", "user": {"id": user}, "trigger_id": "8.8.trig",
                                 "view": {"id": "VFAKE", "type": "modal", "callback_id": view["callback_id"],
                                          "private_metadata": view.get("private_metadata", ""),
                                          "state": {"values": {}}}})


@pytest.fixture
def make_app(fake_slack: FakeSlack, tmp_path: Any) -> Iterator[Callable[..., SlackApp]]:
    servers: list[SlackHTTPServer] = []

    def make(doctor: Doctor, cluster: str, approvers: list[str] | None = None,
             assistant_factory: Callable[..., Any] | None = None, **slack: Any) -> SlackApp:
        settings = SlackSettings.model_validate({"approvers": [APPROVER, GROUP] if approvers is None else approvers,
                                                 "channel_clusters": {CHANNEL: [cluster]}, **slack})
        tokens = SlackTokens(BOT_TOKEN, None, SIGNING_SECRET, fake_slack.api_url)
        client = WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url)
        service = SlackService(doctor, settings, client, AuditLog(tmp_path / "audit.jsonl"),
                               assistant_factory=assistant_factory)
        server = SlackHTTPServer(build_app(service, tokens), "127.0.0.1", 0)
        server.start_background()
        servers.append(server)
        return SlackApp(service, server, fake_slack, cluster)

    yield make
    for server in servers:
        server.shutdown()
        server.server_close()
