"""Fixtures for the metric-source tests: a real Prometheus on 127.0.0.1 (Debian's package; skipped with the reason
when it is absent) loaded with exporter history, and a loopback stand-in for Amazon Managed Service for
Prometheus's query endpoint that checks each request's SigV4 signature with botocore's own signer (service
``aps``) before forwarding it to that Prometheus.
"""

from __future__ import annotations

import contextlib
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from fmdoctor.demo.prometheus_server import binaries, loopback_prometheus
from fmdoctor.loopback import serve_in_background

_AUTH = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$")


@dataclass
class Seen:
    verified: list[str] = field(default_factory=list)  # paths answered
    rejected: list[str] = field(default_factory=list)  # why


def verify(method: str, url: str, headers: dict[str, str], credentials: Credentials, region: str) -> str | None:
    """None when the request carries a valid SigV4 signature for service aps in ``region``; else why not."""
    match = _AUTH.match(headers.get("authorization", ""))
    if not match:
        return "no SigV4 Authorization header"
    key, _, signed_region, service, signed_headers, signature = match.groups()
    if (key, signed_region, service) != (credentials.access_key, region, "aps"):
        return f"credential scope {key}/{signed_region}/{service} is not {credentials.access_key}/{region}/aps"
    request = AWSRequest(method=method, url=url,
                         headers={name: headers[name] for name in signed_headers.split(";") if name in headers})
    request.context["timestamp"] = headers.get("x-amz-date", "")
    signer = SigV4Auth(credentials, "aps", region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    return None if expected == signature else "signature does not match"


@contextmanager
def sigv4_proxy(upstream: str, credentials: Credentials, region: str, workspace: str = "ws-fmdoctor-test"
                ) -> Iterator[tuple[str, Seen]]:
    """Yields (the workspace URL to give fmdoctor, what the proxy saw)."""
    seen = Seen()
    prefix = f"/workspaces/{workspace}/"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            headers = {k.lower(): v for k, v in self.headers.items()}
            why = verify("GET", f"http://{headers.get('host', '')}{self.path}", headers, credentials, region)
            if why is None and not self.path.startswith(prefix):
                why = f"no such workspace in {self.path}"
            if why is not None:
                seen.rejected.append(why)
                self._answer(403, b'{"message":"The request signature we calculated does not match"}')
                return
            seen.verified.append(self.path)
            try:
                with urllib.request.urlopen(upstream + self.path[len(prefix):], timeout=30) as reply:  # noqa: S310
                    self._answer(reply.status, reply.read())
            except urllib.error.HTTPError as exc:
                self._answer(exc.code, exc.read())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_background(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def prometheus() -> Iterator[Callable[[str], str]]:
    """``start(openmetrics_text) -> base URL``: a real Prometheus over that history, stopped after the test."""
    if binaries() is None:
        pytest.skip("needs a real Prometheus: prometheus and promtool are not on PATH (apt-get install prometheus; "
                    "CI's .ci/run installs it)")
    with contextlib.ExitStack() as stack:
        yield lambda history: stack.enter_context(loopback_prometheus(history))


@pytest.fixture
def amp() -> Iterator[Callable[..., tuple[str, Seen]]]:
    """``start(upstream, credentials=..., region=...) -> (workspace URL, what the proxy saw)``."""
    with contextlib.ExitStack() as stack:
        def start(upstream: str, credentials: Credentials | None = None, region: str = "us-west-2"
                  ) -> tuple[str, Seen]:
            return stack.enter_context(sigv4_proxy(upstream, credentials or Credentials("testing", "testing"), region))

        yield start
