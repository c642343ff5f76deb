"""The HTTP side of ``fmdoctor serve`` (an ASGI app run by uvicorn): webhooks in, ``/metrics`` and ``/healthz`` out.

- ``POST /webhook/alertmanager`` and ``POST /webhook/grafana`` take Alertmanager's webhook payload (Grafana
  alerting sends the same shape) behind ``Authorization: Bearer $FMDOCTOR_SERVE_TOKEN``; the server does not
  accept webhooks without the token set. Bodies over ``serve.max_body_bytes`` get 413, a body that takes
  longer than ``BODY_TIMEOUT_S`` to arrive gets 408, a bad payload 400 (Alertmanager does not retry those).
  With ``serve.queue_url`` each alert is put on the queue and answered 200 once SQS has it (the queue's
  guarantees then cover it); without, it is investigated in the request and a failed delivery answers 500
  so Alertmanager retries; when every worker is busy it answers 503 (retried too).
- ``GET /metrics``: the Prometheus text exposition (format 0.0.4) of the last verdict per cluster and check
  and the service's own counters. ``GET /healthz``: 200 while the service runs.

It binds 127.0.0.1 unless told otherwise (``--host``/``serve.host``); put it behind TLS to expose it. Connections
are bounded as the Slack app's are (``fmdoctor.safety.server``): request headers within ``HEADER_TIMEOUT``, idle
keep-alive ``KEEP_ALIVE``, at most ``MAX_PER_PEER`` connections per address, and no connection limit that
would answer ``/healthz`` with 503 while idle connections are held: the webhook's work is bounded by its
worker slots (``serve.concurrency``; 503 when busy), not by the number of connections.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from fmdoctor.mcp.http import BearerAuth
from fmdoctor.serve.events import BadEvent, parse_body
from fmdoctor.serve.processor import DeliveryFailed, Processor
from fmdoctor.serve.state import Metrics

log = logging.getLogger("fmdoctor.serve")
TOKEN_ENV = "FMDOCTOR_SERVE_TOKEN"
WEBHOOK_PATHS = ("/webhook/alertmanager", "/webhook/grafana")
BODY_TIMEOUT_S = 10.0
HEADER_TIMEOUT = 10.0  # seconds a connection has to send its request line and headers
MAX_PER_PEER = 64  # connections one address may hold
MAX_HEADER_BYTES = 16 * 1024
EXPOSITION = "text/plain; version=0.0.4; charset=utf-8"

Scope = dict[str, Any]


class WebhookIntake:
    """Where a webhook's alerts go: onto the SQS queue (``forward``) or straight to the processor."""

    def __init__(self, processor: Processor, concurrency: int, forward: Callable[[str], None] | None = None):
        self.processor, self.forward = processor, forward
        self._slots = threading.BoundedSemaphore(concurrency)

    def take(self, body: bytes, where: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON answer) for one webhook body."""
        try:
            events = parse_body(body, self.processor.max_event_bytes)
        except BadEvent as exc:
            self.processor.metrics.count(exc.reason)
            log.warning("webhook %s refused: %s: %s", where, exc.reason, exc)
            return 400, {"error": exc.reason, "message": str(exc)}
        if self.forward is not None:
            for alert in split_alerts(json.loads(body)):
                self.forward(alert)
            return 200, {"queued": len(events)}
        if not self._slots.acquire(blocking=False):
            return 503, {"error": "busy", "message": "every worker is busy; retry"}
        try:
            outcomes = [self.processor.handle(event, where) for event in events]
        except DeliveryFailed as exc:
            return 500, {"error": "delivery_failed", "message": str(exc)}
        finally:
            self._slots.release()
        if "deferred" in outcomes:  # the cluster could not be looked up right now: Alertmanager retries a 503
            return 503, {"error": "deferred", "message": "AWS could not be asked which cluster this is; retry",
                         "outcomes": outcomes}
        return 200, {"outcomes": outcomes}


def split_alerts(payload: dict[str, Any]) -> list[str]:
    """One webhook notification as one message per alert (each well under SQS's 256 KiB)."""
    rest = {k: v for k, v in payload.items() if k != "alerts"}
    return [json.dumps({**rest, "alerts": [alert]}) for alert in payload["alerts"]]


def app(intake: WebhookIntake | None, metrics: Metrics, token: str | None, max_body: int) -> Any:
    """The ASGI application; ``intake`` None (or no token) serves only /metrics and /healthz."""

    async def webhook(scope: Scope, receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            await _send(send, 405, {"error": "method not allowed"})
            return
        try:
            body = await asyncio.wait_for(_read(receive, max_body), BODY_TIMEOUT_S)
        except _TooLarge:
            metrics.count("too_large")
            await _send(send, 413, {"error": "too_large", "message": f"bodies are limited to {max_body} bytes"})
            return
        except TimeoutError:
            await _send(send, 408, {"error": "timeout", "message": "the body took too long to arrive"})
            return
        where = f"{scope['path']}"
        status, answer = await asyncio.to_thread(intake.take, body, where)  # type: ignore[union-attr]
        await _send(send, status, answer)

    guarded = BearerAuth(webhook, token) if token else None

    async def application(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/healthz" and scope["method"] == "GET":
            await _send(send, 200, {"status": "ok"})
        elif path == "/metrics" and scope["method"] == "GET":
            await _send_text(send, 200, await asyncio.to_thread(metrics.render), EXPOSITION)
        elif path in WEBHOOK_PATHS and guarded is not None and intake is not None:
            await guarded(scope, receive, send)
        else:
            await _send(send, 404, {"error": "not found"})

    return application


class _TooLarge(Exception):
    pass


async def _read(receive: Any, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _send(send: Any, status: int, data: dict[str, Any]) -> None:
    await _send_text(send, status, json.dumps(data), "application/json")


async def _send_text(send: Any, status: int, text: str, content_type: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class HttpServer:
    """uvicorn in a background thread (the main thread keeps SIGTERM for the whole service)."""

    def __init__(self, application: Any, host: str, port: int):
        import uvicorn

        from fmdoctor.safety import server as bounds

        limits = bounds.ServerBounds(HEADER_TIMEOUT, bounds.KEEP_ALIVE, MAX_PER_PEER)  # the one server hardening
        # proxy_headers off: the bounds know a request's connection by scope["client"], the socket's peer.
        config = uvicorn.Config(limits.app(application), host=host, port=port, log_level="warning",
                                access_log=False, proxy_headers=False, lifespan="on", http=limits.protocol,
                                timeout_keep_alive=bounds.KEEP_ALIVE, backlog=1024, server_header=False,
                                h11_max_incomplete_event_size=MAX_HEADER_BYTES, timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="fmdoctor-serve-http", daemon=True)

    def start(self, timeout: float = 15.0) -> tuple[str, int]:
        self.thread.start()
        waited = 0.0
        while not self.server.started and self.thread.is_alive() and waited < timeout:
            threading.Event().wait(0.05)
            waited += 0.05
        if not self.server.started:
            raise RuntimeError("the HTTP endpoint did not start (is the port free?)")
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return host, port

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
