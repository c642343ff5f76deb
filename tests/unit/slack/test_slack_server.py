"""The HTTP server under hostile and bursty input, over real sockets on 127.0.0.1.

Bounded in count (tens of connections, not hundreds) and in time (timeouts shortened for the test); nothing
here measures speed: each test waits for an outcome (an answer, a closed socket) with a generous limit.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_sdk import WebClient

import fmdoctor.slack.server as server_module
from fmdoctor.config import SlackSettings
from fmdoctor.engine.model import Report, RunStats, Status
from fmdoctor.slack.app import build_app
from fmdoctor.slack.commands import USAGE
from fmdoctor.slack.server import EVENTS_PATH, SlackHTTPServer
from fmdoctor.slack.service import SlackService
from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL, SIGNING_SECRET, sign
from fmdoctor.slack.tokens import SlackTokens


class BlockingDoctor:
    """Stands in for the engine: every check waits until the test lets it go, as a slow cluster would."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.settings: Any = None

    def resolve_cluster(self, name: str | None) -> str:
        return name or "c"

    def check(self, cluster: str, only: Any = None) -> Report:
        self.started.release()
        self.release.wait(60)
        from datetime import UTC, datetime

        return Report(cluster=cluster, region="us-west-2", generated_at=datetime.now(UTC), status=Status.OK,
                      stats=RunStats(checks_run=["x"]))


@pytest.fixture
def served(fake_slack, tmp_path, monkeypatch) -> Iterator[tuple[SlackHTTPServer, BlockingDoctor]]:
    monkeypatch.setattr(server_module, "HEADER_TIMEOUT", 1.0)
    monkeypatch.setattr(server_module, "BODY_TIMEOUT", 1.0)
    doctor = BlockingDoctor()
    settings = SlackSettings.model_validate({"approvers": [], "channel_clusters": {CHANNEL: ["c"]}})
    from fmdoctor.remediation.audit import AuditLog

    service = SlackService(doctor, settings, WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url),  # type: ignore[arg-type]
                           AuditLog(tmp_path / "audit.jsonl"))
    tokens = SlackTokens(BOT_TOKEN, None, SIGNING_SECRET, fake_slack.api_url)
    server = SlackHTTPServer(build_app(service, tokens), "127.0.0.1", 0)
    server.start_background()
    try:
        yield server, doctor
    finally:
        doctor.release.set()
        server.shutdown()
        server.server_close()


def raw(server: SlackHTTPServer, request: bytes, read: bool = True, timeout: float = 10) -> bytes:
    host, port = server.socket.getsockname()[:2]
    with socket.create_connection((host, port), timeout=timeout) as conn:
        conn.sendall(request)
        if not read:
            return b""
        chunks = []
        while True:
            try:
                chunk = conn.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                break
        return b"".join(chunks)


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return True


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def command_form(text: str) -> str:
    return urlencode({"command": "/fmdoctor", "text": text, "user_id": "U1", "channel_id": CHANNEL,
                      "team_id": "T0FAKE", "trigger_id": "1.2.trig", "response_url": "http://127.0.0.1:9/r"})


def post(server: SlackHTTPServer, body: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {EVENTS_PATH} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/x-www-form-urlencoded",
             f"Content-Length: {len(body.encode())}", "Connection: close", *[f"{k}: {v}" for k, v in headers.items()]]
    return raw(server, ("\r\n".join(lines) + "\r\n\r\n" + body).encode())


def test_a_negative_content_length_is_a_400_and_nothing_is_read(served):
    server, _ = served
    answer = raw(server, b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n" + b"x" * 100_000)
    assert status_of(answer) == 400


def test_a_body_over_the_limit_is_refused_before_it_is_read(served):
    server, _ = served
    length = server_module.MAX_BODY * 200  # 200 MiB announced; only the headers are ever sent
    answer = raw(server, f"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
    assert status_of(answer) == 413


def test_a_chunked_body_that_keeps_growing_is_cut_off(served):
    server, _ = served
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(server_module.MAX_BODY // len(chunk) + 2))
    answer = raw(server, b"POST /slack/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    assert status_of(answer) == 413


@pytest.mark.parametrize("timestamp", ["not-a-number", "", "-5", "1e9", "an hour ago"])
def test_a_bad_timestamp_is_a_401_never_a_500(served, timestamp):
    server, _ = served
    body = command_form("check c")
    if timestamp == "an hour ago":  # validly signed, but stale: a replay
        headers = sign(body, timestamp=int(time.time()) - 3600)
    else:
        headers = {**sign(body), "X-Slack-Request-Timestamp": timestamp}
    assert status_of(post(server, body, headers)) == 401


def test_an_unsigned_body_is_refused_before_it_is_parsed(served, monkeypatch):
    server, _ = served
    parsed: list[str] = []
    import slack_bolt.request.request as bolt_request

    real = bolt_request.parse_body
    monkeypatch.setattr(bolt_request, "parse_body", lambda *a, **k: parsed.append("parsed") or real(*a, **k))
    body = "payload=" + "{" * 5000
    answer = post(server, body, {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=00"})
    assert status_of(answer) == 401 and parsed == []


def test_idle_and_slow_connections_are_closed_and_do_not_hold_threads(served):
    server, _ = served
    threads_before = threading.active_count()
    idle = [socket.create_connection(server.socket.getsockname()[:2], timeout=10) for _ in range(40)]
    slow = socket.create_connection(server.socket.getsockname()[:2], timeout=10)
    slow.sendall(b"POST /slack/events HTTP/1.1\r\nHost: x\r\n")  # and never the rest of the headers
    assert threading.active_count() <= threads_before + 2  # no thread per connection
    health = raw(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status_of(health) == 200  # served while they hang
    for conn in [*idle, slow]:
        assert conn.recv(1) == b""  # closed by the server (header deadline), not left open
        conn.close()


def test_a_keep_alive_connection_that_trickles_its_next_request_is_closed(served):
    """After a response the deadline is armed again: uvicorn's keep-alive timeout stops once bytes arrive."""
    server, _ = served
    with socket.create_connection(server.socket.getsockname()[:2], timeout=20) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while b"\r\n\r\n" not in first or not _complete(first):  # the whole first response, headers and body
            first += conn.recv(65536)
        assert status_of(first) == 200
        conn.sendall(b"POST /slack/events HTTP/1.1\r\n")  # and never the rest of the headers
        started = time.monotonic()
        assert conn.recv(1) == b""  # closed by the server
        assert time.monotonic() - started < 15


@pytest.mark.parametrize("text", ["help", ""])
def test_help_and_a_bare_command_answer_the_usage(served, text):
    server, _ = served
    body = command_form(text)
    answer = post(server, body, sign(body))
    assert status_of(answer) == 200
    reply = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert reply["text"] == USAGE and reply.get("response_type") == "ephemeral"


def test_acks_never_wait_behind_running_checks_and_bursts_are_answered(served):
    """Every worker of the app is busy with a check that does not end; commands keep being acknowledged."""
    server, doctor = served
    body = command_form("check c")
    busy = 0
    while busy < 8 + 2:  # more checks than the app's workers
        assert status_of(post(server, body, sign(body))) == 200
        busy += 1
    assert doctor.started.acquire(timeout=30)  # the work pool is running checks that wait
    with ThreadPoolExecutor(max_workers=30) as pool:  # a burst of 60 while they wait
        answers = list(pool.map(lambda _: post(server, body, sign(body)), range(60)))
    assert [status_of(a) for a in answers] == [200] * 60
    assert all(b"running" in a for a in answers)


def test_the_default_address_is_loopback():
    from fmdoctor.cli.main import build_parser

    args = build_parser().parse_args(["slack", "serve", "--mode", "http"])
    assert args.host == "127.0.0.1"
