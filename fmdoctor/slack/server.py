"""HTTP mode: a small threaded server in front of the bolt app, with a health endpoint.

``POST /slack/events`` takes slash commands, events and interactive payloads alike (point all three
Request URLs of the Slack app at it); bolt verifies each request's signature before anything else.
``GET /healthz`` answers 200 for load balancers and Kubernetes probes without touching Slack or AWS.
Bolt's own development server has no health endpoint, hence this one (the standard library's, threaded).
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from slack_bolt import App, BoltRequest

log = logging.getLogger(__name__)
EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
MAX_BODY = 1 << 20  # Slack's payloads are far smaller; refuse anything bigger before reading it


class SlackHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, app: App, host: str = "0.0.0.0", port: int = 3000):
        self.app = app
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start_background(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="fmdoctor-slack-http", daemon=True)
        thread.start()
        return thread


class _Handler(BaseHTTPRequestHandler):
    server: SlackHTTPServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if urlsplit(self.path).path == HEALTH_PATH:
            self._send(200, json.dumps({"status": "ok"}), {"Content-Type": "application/json"})
        else:
            self._send(404, "not found")

    def do_POST(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        if parts.path != EVENTS_PATH:
            self._send(404, "not found")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, "too large")
            return
        body = self.rfile.read(length).decode("utf-8", errors="replace")
        headers: dict[str, Any] = {k.lower(): [v] for k, v in self.headers.items()}
        response = self.server.app.dispatch(BoltRequest(body=body, query=parts.query, headers=headers))
        extra = {k: v[0] if isinstance(v, list) and v else str(v) for k, v in response.headers.items()}
        self._send(response.status, response.body, extra)

    def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = (body or "").encode("utf-8")
        self.send_response(status)
        for key, value in (headers or {}).items():
            if key.lower() not in ("content-length", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        log.debug("%s %s", self.address_string(), format % args)  # request lines only: never headers or bodies
