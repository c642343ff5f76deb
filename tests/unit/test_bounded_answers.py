"""Every HTTP answer fmdoctor reads is read through fmdoctor.engine.outbound.read_body, which stops at a size the
caller names: Prometheus/AMP, slurmrestd and IMDS, against a real HTTP server on 127.0.0.1 that answers more."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fmdoctor.engine import host, outbound
from fmdoctor.metrics import prometheus
from fmdoctor.metrics.prometheus import Endpoint, PrometheusClient, PrometheusFailed
from fmdoctor.scheduler import slurm
from fmdoctor.scheduler.model import SchedulerUnavailable


@pytest.mark.parametrize(("size", "limit", "reads"), [(0, 10, True), (10, 10, True), (11, 10, False),
                                                      (10_000, 10, False)],
                         ids=["empty", "at-the-limit", "one-byte-over", "far-over"])
def test_read_body_stops_at_its_limit(size, limit, reads):
    answer = io.BytesIO(b"x" * size)
    if reads:
        assert outbound.read_body(answer, limit, "it") == b"x" * size
    else:
        with pytest.raises(outbound.ResponseTooLarge, match=f"it answered more than {limit:,} bytes"):
            outbound.read_body(answer, limit, "it")
        assert answer.tell() == limit + 1  # no more than one byte past the limit was read


class Answering:
    """A loopback server answering every request ``status`` with ``body`` (no Content-Length: read to the end)."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        outer = self
        self.body, self.status = body, status

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(outer.body)

            do_GET = do_PUT = do_POST = _any  # noqa: N815 (BaseHTTPRequestHandler's names)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Answering]:
    answering = Answering(b'{"status": "success", "data": {"resultType": "matrix", "result": []}}' + b" " * 5000)
    yield answering
    answering.close()


def _query(url: str) -> Any:
    end = datetime(2026, 5, 1, tzinfo=UTC)
    client = PrometheusClient(Endpoint(url + "/"), lambda *_: None, timeout=5)
    return client.query_range("up", end - timedelta(hours=1), end, timedelta(minutes=1))


def test_a_prometheus_answer_over_the_limit_is_a_failure_not_held(server, monkeypatch):
    assert _query(server.url) == []  # within the default limit it is read
    monkeypatch.setattr(prometheus, "RESPONSE_MAX_BYTES", 1000)
    with pytest.raises(PrometheusFailed, match="answered more than 1,000 bytes"):
        _query(server.url)


def test_a_prometheus_error_body_is_read_only_as_far_as_a_message_needs(server, monkeypatch):
    server.status, server.body = 500, b"e" * 150 + b"TAIL-NEVER-READ" + b"e" * 100_000
    monkeypatch.setattr(outbound, "ERROR_BODY_MAX", 100)
    with pytest.raises(PrometheusFailed) as failed:
        _query(server.url)
    assert "answered 500" in str(failed.value.failure.message) and "TAIL-NEVER-READ" not in str(failed.value)


def test_a_slurmrestd_answer_over_the_limit_is_unavailable_not_held(server, monkeypatch):
    monkeypatch.setattr(slurm, "RESPONSE_MAX_BYTES", 1000)
    with pytest.raises(SchedulerUnavailable) as failed:
        slurm.RestSlurm(server.url, "jwt").api()
    assert failed.value.code == "ResponseTooLarge" and "more than 1,000 bytes" in failed.value.message


def test_an_imds_answer_over_the_limit_is_unavailable_not_held(server, monkeypatch):
    monkeypatch.setattr(host, "IMDS_MAX_BYTES", 1000)
    with pytest.raises(host.ImdsUnavailable, match="more than 1,000 bytes"):
        host.LocalHost(imds_endpoint=server.url).imds("latest/meta-data/instance-id")
