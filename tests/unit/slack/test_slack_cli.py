"""``fmdoctor slack serve``: tokens from the environment only, HTTP mode with /healthz, Socket Mode wiring."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlencode

import pytest

from fmdoctor.cli.main import main
from fmdoctor.slack.server import SlackHTTPServer
from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL, SIGNING_SECRET, sign, texts

# End to end, so out of the fast tier (`pytest -m "not e2e"`): `fmdoctor slack` end to end: the command's
# servers and the fake Web API.
pytestmark = pytest.mark.e2e


APP_TOKEN = "xapp-1-A0FAKE-1234-fmdoctorapptoken"


@pytest.fixture
def slack_env(monkeypatch, fake_slack):
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SIGNING_SECRET)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("SLACK_API_URL", fake_slack.api_url)


@pytest.mark.parametrize(("mode", "unset", "message"), [
    ("http", "SLACK_BOT_TOKEN", "SLACK_BOT_TOKEN is not set"),
    ("http", "SLACK_SIGNING_SECRET", "--mode http needs SLACK_SIGNING_SECRET"),
    ("socket", "SLACK_APP_TOKEN", "--mode socket needs SLACK_APP_TOKEN"),
])
def test_serve_without_its_tokens_says_which_and_exits_3(slack_env, monkeypatch, capsys, mode, unset, message):
    monkeypatch.delenv(unset)
    assert main(["slack", "serve", "--mode", mode, "--demo"]) == 3
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_bot_token_slack_refuses_is_a_clear_error(slack_env, fake_slack, capsys):
    fake_slack.failures["auth.test"] = "invalid_auth"
    assert main(["slack", "serve", "--mode", "http", "--demo", "--host", "127.0.0.1", "--port", "0"]) == 3
    err = capsys.readouterr().err
    assert "Slack refused the bot token" in err and BOT_TOKEN not in err


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_serve_http_answers_health_and_signed_commands_and_never_logs_secrets(slack_env, fake_slack, monkeypatch,
                                                                              caplog, capsys):
    servers: list[SlackHTTPServer] = []
    real_serve = SlackHTTPServer.serve_forever

    def serve_forever(self, *args, **kwargs):
        servers.append(self)
        real_serve(self, *args, **kwargs)

    monkeypatch.setattr(SlackHTTPServer, "serve_forever", serve_forever)
    caplog.set_level(logging.DEBUG)
    codes = []
    thread = threading.Thread(target=lambda: codes.append(main(["-vv", "slack", "serve", "--mode", "http", "--demo",
                                                                "--host", "127.0.0.1", "--port", "0"])))
    thread.start()
    deadline = time.monotonic() + 60
    while not servers and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)
    [server] = servers
    try:
        assert get(server.url + "/healthz") == (200, json.dumps({"status": "ok"}))
        assert get(server.url + "/elsewhere")[0] == 404
        body = urlencode({"command": "/fmdoctor", "text": "check --only efa-sg-self-reference", "user_id": "U1",
                          "channel_id": CHANNEL, "team_id": "T0FAKE", "response_url": f"{fake_slack.url}/response/x"})
        request = urllib.request.Request(server.url + "/slack/events", data=body.encode(), method="POST", headers={
            "Content-Type": "application/x-www-form-urlencoded", **sign(body)})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        [message] = fake_slack.wait_for("chat.postMessage")
        assert "demo-llm-train" in texts(message) and "efa-sg-self-reference" in json.dumps(message["blocks"])
    finally:
        server.shutdown()
        thread.join(30)
    assert codes == [0]
    logged = caplog.text + "".join(capsys.readouterr())
    assert "listening on http://127.0.0.1:" in logged
    assert BOT_TOKEN not in logged and SIGNING_SECRET not in logged


def test_serve_socket_mode_connects_with_the_app_token_through_the_api_url(slack_env, fake_slack, monkeypatch):
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    started = []
    monkeypatch.setattr(SocketModeHandler, "start", lambda self: started.append(
        (self.app_token, self.client.web_client.base_url, self.app.client.token)))
    assert main(["slack", "serve", "--mode", "socket", "--demo"]) == 0
    assert started == [(APP_TOKEN, fake_slack.api_url, BOT_TOKEN)]
    assert fake_slack.of("auth.test"), "the bot token was verified against SLACK_API_URL"


def test_other_commands_start_without_importing_slack():
    code = ("import sys, fmdoctor.cli.main; "
            "print(sorted(m for m in sys.modules if m.startswith(('slack', 'fmdoctor.slack'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
