"""The HTTP endpoint on 127.0.0.1 under uvicorn: bearer auth, body limits, webhooks in, /metrics and /healthz."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fmdoctor.serve.http import HttpServer, WebhookIntake, app, split_alerts
from fmdoctor.serve.processor import DeliveryFailed
from fmdoctor.serve.state import Metrics

from ...unfinished_requests import closed
from ...unfinished_requests import hold as hold_unfinished
from .test_events import load

TOKEN = "0123456789abcdef0123456789abcdef"


class StubProcessor:
    max_event_bytes = 256 * 1024

    def __init__(self):
        self.metrics = Metrics()
        self.handled = []
        self.fail = False

    def handle(self, event, where, cancel=None):
        if self.fail:
            raise DeliveryFailed("slack (timeout)")
        self.handled.append(event)
        outcome = getattr(self, "outcome", "delivered")
        self.metrics.count(outcome)
        return outcome


@pytest.fixture
def endpoint():
    processor = StubProcessor()
    server = HttpServer(app(WebhookIntake(processor, 2), processor.metrics, TOKEN, 64 * 1024), "127.0.0.1", 0)
    host, port = server.start()
    yield f"http://{host}:{port}", processor
    server.stop()


def call(url: str, body: bytes | None = None, token: str | None = TOKEN) -> tuple[int, str, str]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("Content-Type", "")


def test_alertmanager_webhook_is_taken(endpoint):
    url, processor = endpoint
    status, body, _ = call(url + "/webhook/alertmanager", load("alertmanager-webhook.json").encode())
    assert status == 200 and json.loads(body) == {"outcomes": ["delivered"]}
    assert processor.handled[0].labels["alertname"] == "GPUXidError"
    status, _, _ = call(url + "/webhook/grafana", load("grafana-webhook.json").encode())
    assert status == 200 and processor.handled[1].source == "grafana"


@pytest.mark.parametrize("token", [None, "wrong-token-wrong-token-wrong"])
def test_webhook_needs_the_bearer_token(endpoint, token):
    url, processor = endpoint
    status, _, _ = call(url + "/webhook/alertmanager", load("alertmanager-webhook.json").encode(), token=token)
    assert status == 401 and processor.handled == []


def test_bad_and_huge_bodies_are_refused(endpoint):
    url, processor = endpoint
    assert call(url + "/webhook/alertmanager", b"{nope")[0] == 400
    assert call(url + "/webhook/alertmanager", b"x" * (65 * 1024))[0] == 413
    assert processor.handled == [] and processor.metrics.events == {"malformed": 1, "too_large": 1}


def test_failed_delivery_answers_500_so_alertmanager_retries(endpoint):
    url, processor = endpoint
    processor.fail = True
    assert call(url + "/webhook/alertmanager", load("alertmanager-webhook.json").encode())[0] == 500


def test_an_event_whose_cluster_could_not_be_looked_up_is_retried(endpoint):
    url, processor = endpoint
    processor.outcome = "deferred"  # AWS throttled the instance look-up: Alertmanager retries a 503
    status, body, _ = call(url + "/webhook/alertmanager", load("alertmanager-webhook.json").encode())
    assert status == 503 and json.loads(body)["error"] == "deferred"


def test_metrics_and_health(endpoint):
    url, processor = endpoint
    processor.metrics.count("unknown_cluster")
    status, body, content_type = call(url + "/metrics", token=None)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    [family] = [f for f in text_string_to_metric_families(body) if f.name == "fmdoctor_serve_events"]
    assert family.type == "counter" and family.samples[0].value == 1
    assert call(url + "/healthz", token=None)[:2] == (200, '{"status": "ok"}')
    assert call(url + "/nothing", token=None)[0] == 404


def test_without_a_token_there_are_no_webhooks():
    processor = StubProcessor()
    server = HttpServer(app(WebhookIntake(processor, 1), processor.metrics, None, 1024), "127.0.0.1", 0)
    host, port = server.start()
    try:
        assert call(f"http://{host}:{port}/webhook/alertmanager", b"{}")[0] == 404
        assert call(f"http://{host}:{port}/healthz", token=None)[0] == 200
    finally:
        server.stop()


def test_forwarding_puts_one_alert_per_message():
    payload = json.loads(load("alertmanager-webhook.json"))
    payload["alerts"].append({**payload["alerts"][0], "fingerprint": "another"})
    messages = [json.loads(m) for m in split_alerts(payload)]
    assert [m["alerts"][0]["fingerprint"] for m in messages] == ["c6c3ab1e7d1a2f40", "another"]
    assert all(m["version"] == "4" and m["commonLabels"] == payload["commonLabels"] for m in messages)


# --- issue 35 item 1: idle connections cannot make serve unready --------------------------------------------------
def hold(port: int, count: int, source: str = "127.0.0.2") -> list:
    """``count`` connections from ``source`` that start a request and never finish its headers."""
    return hold_unfinished(port, count, b"POST /webhook/alertmanager HTTP/1.1", source)


def test_held_connections_leave_healthz_and_webhooks_answering(monkeypatch):
    import fmdoctor.serve.http as serve_http

    monkeypatch.setattr(serve_http, "HEADER_TIMEOUT", 2.0, raising=False)
    processor = StubProcessor()
    server = HttpServer(app(WebhookIntake(processor, 2), processor.metrics, TOKEN, 64 * 1024), "127.0.0.1", 0)
    host, port = server.start()
    held = hold(port, 140)  # more than uvicorn's old limit_concurrency (128), from one address
    try:
        assert call(f"http://{host}:{port}/healthz", token=None)[0] == 200
        status, _, _ = call(f"http://{host}:{port}/webhook/alertmanager", load("alertmanager-webhook.json").encode())
        assert status == 200
        cap = getattr(serve_http, "MAX_PER_PEER", 140)
        over = [c for c in held[cap:] if closed(c, 0.5)]
        assert len(over) == 140 - cap == 76  # one address holds at most MAX_PER_PEER (64)
        assert all(closed(c, 5.0) for c in held[:cap])  # unfinished headers: closed after HEADER_TIMEOUT
        held += hold(port, 3)  # the address may connect again once its connections are gone
        assert call(f"http://{host}:{port}/healthz", token=None)[0] == 200
    finally:
        for conn in held:
            conn.close()
        server.stop()


def test_a_stopped_service_gives_ctrl_c_back():
    """``run`` takes SIGTERM and SIGINT for its graceful stop while it serves; once stopped, whoever embedded it gets
    its own handlers back (a leaked handler would turn a later Ctrl-C into a call on a dead service)."""
    import signal

    from fmdoctor.config import ServeSettings
    from fmdoctor.engine.api import Connection, Doctor
    from fmdoctor.serve.service import Service

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    service = Service(Doctor(connection=Connection(region="us-west-2")), ServeSettings(), [])
    service.stop.set()
    service.run()
    assert {sig: signal.getsignal(sig) for sig in before} == before
