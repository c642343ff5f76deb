"""Issue 35 item 2: credentials never follow a redirect to another origin, a redirected POST is a failed delivery,
and a SigV4-signed request is never redirected. Two real HTTP servers on 127.0.0.1: the configured one answers
302 to the other ("evil"), which records whatever reaches it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.credentials import Credentials

from fmdoctor.engine.outbound import RedirectRefused
from fmdoctor.metrics.prometheus import BEARER, SIGV4, Endpoint, PrometheusClient, PrometheusFailed
from fmdoctor.serve.events import parse_body
from fmdoctor.serve.investigate import Result
from fmdoctor.serve.outputs import WebhookOutput, redactor

SECRET = "prometheus-bearer-0123456789abcdef"
ANSWER = {"status": "success", "data": {"resultType": "matrix", "result": []}}


class Server:
    """A loopback HTTP server; ``location`` set: every request is answered 302 there, else 200 with ``ANSWER``."""

    def __init__(self, status: int = 302) -> None:
        self.seen: list[dict[str, Any]] = []
        self.location: str | None = None
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                   "body": self.rfile.read(length) if length else b""})
                if outer.location and not self.path.startswith("/prefix/"):
                    self.send_response(outer.status)
                    self.send_header("Location", outer.location + self.path.lstrip("/"))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps(ANSWER).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _any  # noqa: N815 (BaseHTTPRequestHandler's names)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    home, evil = Server(), Server()
    home.location = evil.url.replace("127.0.0.1", "localhost")  # another origin: another host name
    yield home, evil
    home.close()
    evil.close()


def result() -> Result:
    body = json.dumps({"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "source": "aws.ec2",
                       "detail-type": "EC2 Spot Instance Interruption Warning", "time": "2026-05-01T03:00:00Z",
                       "region": "us-west-2", "account": "123456789012", "resources": [],
                       "detail": {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"}})
    [event] = parse_body(body, 256 * 1024)
    return Result(event, "llm-train", ("spot",), narrative="n")


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirected_webhook_post_is_a_failed_delivery_and_the_token_stays_home(servers, status):
    home, evil = servers
    home.status = status
    output = WebhookOutput(home.url, redactor(), token="webhook-token-0123456789abcdef")
    with pytest.raises(RedirectRefused, match="not a delivery"):
        output.send(result())
    assert [s["method"] for s in home.seen] == ["POST"]
    assert evil.seen == []  # neither the token nor a body-less GET reached the Location host


def test_a_redirect_to_the_same_origin_is_still_not_a_delivery(servers):
    home, _ = servers
    home.location = home.url + "elsewhere/"
    with pytest.raises(RedirectRefused):
        WebhookOutput(home.url, redactor()).send(result())
    assert len(home.seen) == 1


def test_every_delivery_carries_the_event_id_as_its_idempotency_key(servers):
    _, receiver = servers
    WebhookOutput(receiver.url, redactor()).send(result())
    WebhookOutput(receiver.url, redactor()).send(result())  # a retry after a crash mid-send: the same key
    keys = {s["headers"]["Idempotency-Key"] for s in receiver.seen}
    bodies = {json.loads(s["body"])["idempotency_key"] for s in receiver.seen}
    assert keys == bodies == {"7bf73129-1428-4cd3-a780-95db273d1602"}


def query(endpoint: Endpoint) -> Any:
    client = PrometheusClient(endpoint, lambda *_: None, timeout=5)
    end = datetime(2026, 5, 1, tzinfo=UTC)
    return client.query_range("up", end - timedelta(hours=1), end, timedelta(minutes=1))


def test_a_bearer_token_never_follows_a_redirect_to_another_host(servers):
    home, evil = servers
    with pytest.raises(PrometheusFailed, match="another origin"):
        query(Endpoint(home.url, BEARER, SECRET))
    assert home.seen[0]["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert evil.seen == []


def test_a_bearer_token_follows_a_redirect_on_its_own_origin(servers):
    home, evil = servers
    home.location = home.url + "prefix/"
    assert query(Endpoint(home.url, BEARER, SECRET)) == []
    assert [s["path"].split("?")[0] for s in home.seen] == ["/api/v1/query_range", "/prefix/api/v1/query_range"]
    assert all(s["headers"]["Authorization"] == f"Bearer {SECRET}" for s in home.seen) and evil.seen == []


def test_without_credentials_a_get_may_follow_a_redirect(servers):
    home, evil = servers
    assert query(Endpoint(home.url)) == []
    assert len(evil.seen) == 1 and "Authorization" not in evil.seen[0]["headers"]


def test_a_sigv4_signed_query_is_never_redirected(servers):
    home, evil = servers
    home.location = home.url + "moved/"  # even to its own origin: the signature covers host and path
    credentials = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    with pytest.raises(PrometheusFailed, match="never redirected"):
        query(Endpoint(home.url, SIGV4, credentials=credentials, region="us-west-2"))
    assert len(home.seen) == 1 and home.seen[0]["headers"]["Authorization"].startswith("AWS4-HMAC-SHA256")
    assert evil.seen == []
