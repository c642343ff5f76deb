"""HTTP mode: the bolt app behind uvicorn (an ASGI server, as slack-bolt's adapters target), with a health
endpoint, on 127.0.0.1 unless told otherwise.

``POST /slack/events`` takes slash commands, events and interactive payloads alike (point all three Request
URLs of the Slack app at it); ``GET /healthz`` answers 200 for load balancers and Kubernetes probes without
touching Slack or AWS. What holds for every request, whatever it sends:

- the body is bounded (``MAX_BODY``): a ``Content-Length`` over it, or a chunked body that grows past it, is
  refused with 413 before more is read; an invalid ``Content-Length`` (negative, not a number) is a 400 from
  the HTTP parser itself;
- time is bounded: a connection must finish its request headers within ``HEADER_TIMEOUT`` and its body
  within ``BODY_TIMEOUT``, and an idle keep-alive connection is closed after ``KEEP_ALIVE``; one address
  holds at most ``MAX_PER_PEER`` connections (``fmdoctor.safety.server``, shared with ``fmdoctor serve``);
  connections cost no thread while they wait (asyncio), so many idle ones cannot starve the rest;
- the signature (v0 HMAC-SHA256 of the timestamp and body, 5 minutes) is verified before the body is parsed
  at all; a missing, stale or non-numeric timestamp or a wrong signature is a 401;
- bad input is a 4xx, never a 500; bolt's own handling runs in a pool of its own (``ACK_WORKERS``) and
  the app acknowledges before its work runs (lazy listeners in bolt's listener pool), so acks never wait
  behind running checks; the listen backlog (``BACKLOG``) absorbs bursts of commands.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import uvicorn
from slack_bolt import App, BoltRequest
from slack_sdk.signature import SignatureVerifier

from fmdoctor.safety.server import MAX_PER_PEER, ServerBounds

log = logging.getLogger(__name__)
EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
MAX_BODY = 1 << 20  # Slack's payloads are far smaller (a view submission is a few KiB)
HEADER_TIMEOUT = 10.0  # seconds for a new connection to send its request line and headers
BODY_TIMEOUT = 10.0  # seconds to receive each part of the body
KEEP_ALIVE = 5  # seconds an idle keep-alive connection stays open
BACKLOG = 1024  # connections the kernel queues while the server accepts (Slack sends bursts)
ACK_WORKERS = 32  # threads verifying and acknowledging requests; checks run in bolt's listener pool
MAX_HEADER_BYTES = 16 * 1024

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


class _Refused(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status, self.text = status, text


class SlackAsgi:
    """The ASGI application: health, size and time bounds, the signature, then bolt."""

    def __init__(self, app: App, signing_secret: str):
        self.app = app
        self.verifier = SignatureVerifier(signing_secret)
        self.pool = ThreadPoolExecutor(max_workers=ACK_WORKERS, thread_name_prefix="fmdoctor-slack-ack")

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        try:
            status, headers, body = await self._answer(scope, receive)
        except _Refused as refused:
            status, headers, body = refused.status, {"content-type": "text/plain; charset=utf-8"}, refused.text
        except Exception:  # a bug of ours, not bad input: logged, and a plain 500 without details
            log.exception("the Slack request failed")
            status, headers, body = 500, {"content-type": "text/plain; charset=utf-8"}, "internal error"
        data = body.encode("utf-8")
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
                                if k.lower() not in ("content-length", "connection")]
                    + [(b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _answer(self, scope: dict[str, Any], receive: Receive) -> tuple[int, dict[str, str], str]:
        path, method = scope["path"], scope["method"]
        if path == HEALTH_PATH and method in ("GET", "HEAD"):
            return 200, {"content-type": "application/json"}, json.dumps({"status": "ok"})
        if path != EVENTS_PATH:
            raise _Refused(404, "not found")
        if method != "POST":
            raise _Refused(405, "POST only")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        body = await _read_body(receive, headers.get("content-length"))
        timestamp = headers.get("x-slack-request-timestamp", "")
        signature = headers.get("x-slack-signature", "")
        if not timestamp.isdigit() or not signature or not self.verifier.is_valid(body, timestamp, signature):
            raise _Refused(401, "invalid request: the Slack signature or timestamp does not verify")
        text = body.decode("utf-8", errors="replace")
        request = BoltRequest(body=text, query=scope.get("query_string", b"").decode("latin-1"),
                              headers={k: [v] for k, v in headers.items()})
        response = await asyncio.get_running_loop().run_in_executor(self.pool, self.app.dispatch, request)
        extra = {k: v[0] if isinstance(v, list) and v else str(v) for k, v in response.headers.items()}
        return response.status, extra, response.body or ""


async def _read_body(receive: Receive, declared: str | None) -> bytes:
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise _Refused(413 if declared.isdigit() else 400, "body too large or Content-Length invalid")
    chunks = bytearray()
    while True:
        try:
            message = await asyncio.wait_for(receive(), BODY_TIMEOUT)
        except TimeoutError:
            raise _Refused(408, "the body did not arrive in time") from None
        if message["type"] != "http.request":
            raise _Refused(400, "the client went away")
        chunks.extend(message.get("body", b""))
        if len(chunks) > MAX_BODY:
            raise _Refused(413, "body too large")
        if not message.get("more_body", False):
            return bytes(chunks)


class SlackHTTPServer:
    """uvicorn serving :class:`SlackAsgi` on ``host:port`` (127.0.0.1 by default; port 0 picks a free one)."""

    def __init__(self, app: App, host: str = "127.0.0.1", port: int = 3000, signing_secret: str | None = None):
        secret = signing_secret or getattr(app, "_signing_secret", None) or ""
        if not secret:
            raise ValueError("HTTP mode needs the signing secret to verify requests")
        self.asgi = SlackAsgi(app, secret)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.socket.listen(BACKLOG)
        bounds = ServerBounds(HEADER_TIMEOUT, KEEP_ALIVE, MAX_PER_PEER)  # the one server hardening
        # proxy_headers off: the bounds know a request's connection by scope["client"], the socket's peer.
        config = uvicorn.Config(bounds.app(self.asgi), http=bounds.protocol,  # type: ignore[arg-type]
                                lifespan="off", log_level="warning", access_log=False, proxy_headers=False,
                                backlog=BACKLOG, timeout_keep_alive=KEEP_ALIVE, server_header=False,
                                h11_max_incomplete_event_size=MAX_HEADER_BYTES, timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self.server.run(sockets=[self.socket])

    def start_background(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.serve_forever, name="fmdoctor-slack-http", daemon=True)
        self._thread.start()
        return self._thread

    def shutdown(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def server_close(self) -> None:
        self.socket.close()
        self.asgi.pool.shutdown(wait=False, cancel_futures=True)
