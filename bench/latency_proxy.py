"""An HTTP proxy on 127.0.0.1 that holds every request ``delay_s`` before passing it to moto, for bench/rounds.py.

Against moto every call returns in milliseconds; on AWS each costs 50-150 ms, so what a user waits for is
the number of calls that wait on one another. Holding each request a fixed time in front of the server turns
that number into wall time: sequential rounds = (wall at delay d - wall at 0) / d.

The proxy also records every answered call (service, operation, a digest of the request body and its
interval), so the bench can count calls by operation, find a request made twice (the same operation with the
same body: a repeated call) and the most calls in flight at once. With ``throttle_share`` > 0 it answers that
share of requests with the service's throttling error in the service's own protocol (EC2's
RequestLimitExceeded, a query/JSON/CBOR ThrottlingException, S3's SlowDown), never the same request more
than twice in a row, as AWS's transient throttling does.
"""

from __future__ import annotations

import hashlib
import http.client
import random
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
SCOPE = re.compile(r"Credential=[^/]+/\d+/[^/]+/([^/]+)/aws4_request")
# The signing name of a request's credential scope -> botocore's service name (how fmdoctor counts calls).
SERVICE_OF_SIGNING_NAME = {"monitoring": "cloudwatch", "tagging": "resourcegroupstaggingapi"}


@dataclass(frozen=True)
class Call:
    op: str  # service.Operation
    digest: str  # of the request (method, path, body): the same digest twice is the same call repeated
    started: float
    ended: float
    throttled: bool = False


@dataclass
class Recorder:
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def take(self) -> list[Call]:
        with self.lock:
            out, self.calls = self.calls, []
            return out


def operation(service: str, method: str, path: str, headers: Any, body: bytes) -> str:
    """service.Operation of a request in any of the protocols the commands use."""
    target = headers.get("X-Amz-Target")
    if target:  # JSON protocols: "AmazonSQS.ReceiveMessage"
        return f"{service}.{target.rsplit('.', 1)[-1]}"
    match = re.search(r"/operation/([A-Za-z0-9]+)", path)
    if match:  # smithy-rpc-v2-cbor (CloudWatch, the tagging API)
        return f"{service}.{match.group(1)}"
    if body and b"Action=" in body[:4096]:  # query protocols (EC2, STS)
        action = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("Action", ["?"])[0]
        return f"{service}.{action}"
    query = urllib.parse.urlsplit(path).query
    if service == "s3":  # REST: enough to tell the listings apart
        kind = "ListObjectsV2" if "list-type=2" in query else "GetBucketLocation" if "location" in query else method
        return f"s3.{kind}"
    return f"{service}.{method}"


def _cbor_text(text: str) -> bytes:
    data = text.encode()
    return (bytes([0x60 + len(data)]) if len(data) < 24 else bytes([0x78, len(data)])) + data


def throttling_answer(service: str, headers: Any, path: str) -> tuple[int, dict[str, str], bytes]:
    """The service's own throttling error, in its protocol."""
    if headers.get("X-Amz-Target"):
        return 400, {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": "ThrottlingException"}, (
            b'{"__type":"ThrottlingException","message":"Rate exceeded"}')
    if "/operation/" in path:
        body = bytes([0xA2]) + _cbor_text("__type") + _cbor_text("ThrottlingException") + _cbor_text(
            "message") + _cbor_text("Rate exceeded")
        return 400, {"Content-Type": "application/cbor", "smithy-protocol": "rpc-v2-cbor"}, body
    if service == "ec2":
        return 503, {"Content-Type": "text/xml"}, (
            b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded."
            b"</Message></Error></Errors><RequestID>bench</RequestID></Response>")
    if service == "s3":
        return 503, {"Content-Type": "application/xml"}, (
            b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")
    return 400, {"Content-Type": "text/xml"}, (
        b"<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message>"
        b"</Error><RequestId>bench</RequestId></ErrorResponse>")


class LatencyProxy:
    def __init__(self, upstream: str, delay_s: float = 0.0, throttle_share: float = 0.0, seed: int = 39):
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.delay_s = delay_s
        self.throttle_share = throttle_share
        self.recorder = Recorder()
        self._random = random.Random(seed)
        self._streak: dict[str, int] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _handle(self) -> None:
                proxy.handle(self)

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="latency-proxy")
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _throttle(self, digest: str) -> bool:
        if self.throttle_share <= 0:
            return False
        with self._lock:
            streak = self._streak.get(digest, 0)
            throttle = streak < 2 and self._random.random() < self.throttle_share
            self._streak[digest] = streak + 1 if throttle else 0
            return throttle

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(*self.upstream, timeout=600)
        return conn

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        started = time.perf_counter()
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        scope = SCOPE.search(request.headers.get("Authorization", ""))
        service = SERVICE_OF_SIGNING_NAME.get(scope.group(1), scope.group(1)) if scope else "?"
        op = operation(service, request.command, request.path, request.headers, body)
        digest = hashlib.sha1(request.command.encode() + request.path.encode() + b"\0" + body).hexdigest()
        if self.delay_s:
            time.sleep(self.delay_s)
        if self._throttle(digest):
            status, headers, answer = throttling_answer(service, request.headers, request.path)
            self._reply(request, status, headers, answer)
            self.recorder.add(Call(op, digest, started, time.perf_counter(), throttled=True))
            return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        for attempt in range(2):  # a kept-alive upstream connection may have been closed by moto
            conn = self._connection()
            try:
                conn.request(request.command, request.path, body=body or None, headers=headers)
                response = conn.getresponse()
                answer = response.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        out = {k: v for k, v in response.getheaders() if k.lower() not in HOP_HEADERS | {"content-length"}}
        self._reply(request, response.status, out, answer)
        self.recorder.add(Call(op, digest, started, time.perf_counter()))

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        request.send_response(status)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(body)


def max_in_flight(calls: list[Call]) -> int:
    events = sorted([(c.started, 1) for c in calls] + [(c.ended, -1) for c in calls], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def chain(calls: list[Call]) -> int:
    """The most calls one after another (none overlapping the next): a count of rounds that needs no second run."""
    return len(chain_calls(calls))


def chain_calls(calls: list[Call]) -> list[Call]:
    """Such a longest run of calls one after another (earliest end first, which finds the most)."""
    out: list[Call] = []
    free_at = float("-inf")
    for call in sorted(calls, key=lambda c: c.ended):
        if call.started >= free_at:
            out.append(call)
            free_at = call.ended
    return out


def chain_text(calls: list[Call]) -> str:
    """The chain's operations in order, repeats folded ('ec2.DescribeInstances x2 > ...')."""
    names: list[list[Any]] = []
    for call in chain_calls(calls):
        op = call.op.split(".", 1)[1] if "." in call.op else call.op
        if names and names[-1][0] == op:
            names[-1][1] += 1
        else:
            names.append([op, 1])
    return " > ".join(f"{op}" + (f" x{n}" if n > 1 else "") for op, n in names)
