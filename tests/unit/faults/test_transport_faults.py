"""The network failing under AWS calls: read timeouts and connection resets, injected at botocore's hook
for one API, and from real sockets on 127.0.0.1 (an endpoint that never answers, one that resets every
connection) for the whole run. Retries use the standard mode; nothing may hang or pass as healthy."""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import botocore.endpoint
import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import AwsOptions
from fmdoctor.engine.model import Status

from ...conftest import CLUSTER, REGION
from .conftest import FAMILIES

BOUND_S = 60  # a run that takes longer than this is a hang


@pytest.mark.parametrize(("kind", "code"), [("timeout", "Timeout"), ("reset", "ConnectionError")])
@pytest.mark.parametrize(("service", "operation", "family"), [
    ("cloudwatch", "GetMetricData", "gpu"), ("s3", "ListObjectsV2", "checkpoint"),
])
def test_a_call_that_keeps_failing_on_the_wire_is_retried_then_reported(
        world, run_world, faults, retry_sleeps, kind, code, service, operation, family):
    faults.drop(service, operation, kind)
    report = run_world()
    assert faults.injected[f"{service}.{operation}"] == 5  # standard mode retries transport errors too
    assert {e.check for e in report.errors} == set(FAMILIES[family]) and {e.code for e in report.errors} == {code}
    assert report.status is Status.WARNING  # the other families were verified; this one is not 'ok'


def test_a_call_that_fails_on_the_wire_twice_then_answers_is_invisible(world, run_world, faults):
    faults.drop("sqs", "ReceiveMessage", "reset", times=1).drop("ec2", "DescribeInstances", "timeout", times=2)
    report = run_world()
    assert report.errors == [] and report.status is Status.OK


def test_drop_refuses_unknown_kinds(faults):
    with pytest.raises(ValueError, match="kind must be one of"):
        faults.drop("ec2", "DescribeInstances", "slow")


def _serve(handler) -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    stop = threading.Event()
    thread = threading.Thread(target=handler, args=(listener, stop), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def _never_answer(listener: socket.socket, stop: threading.Event) -> None:
    held = []
    listener.settimeout(0.1)
    while not stop.is_set():
        try:
            held.append(listener.accept()[0])  # read the request into the void; never reply
        except OSError:
            continue


def _reset_every_connection(listener: socket.socket, stop: threading.Event) -> None:
    listener.settimeout(0.1)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        conn.recv(65536)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        conn.close()


@pytest.fixture
def silent_endpoint():
    yield from _serve(_never_answer)


@pytest.fixture
def resetting_endpoint():
    yield from _serve(_reset_every_connection)


def _check_against(url: str) -> tuple[object, float]:
    def factory(options):
        return new_aws(dataclasses.replace(options, endpoint_url=url, read_timeout=0.3, connect_timeout=0.3))

    doctor = Doctor(settings=Settings(), connection=Connection(region=REGION), aws_factory=factory)
    started = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:  # result(timeout) turns a hang into a failure, not a stuck suite
        report = pool.submit(doctor.check, CLUSTER, ["efa"]).result(timeout=BOUND_S)
    return report, time.perf_counter() - started


@pytest.mark.parametrize(("endpoint", "code"), [("silent_endpoint", "Timeout"), ("resetting_endpoint",
                                                                                   "ConnectionError")])
def test_an_endpoint_that_never_answers_or_resets_ends_in_unknown_not_a_hang(request, monkeypatch, endpoint, code):
    by_thread: list[str] = []  # botocore's back-off sleeps, by the thread that retries (recorded, not slept)
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda _: by_thread.append(threading.current_thread().name))
    report, elapsed = _check_against(request.getfixturevalue(endpoint))
    [error] = report.errors
    assert (error.check, error.code) == ("inventory", code)
    assert report.findings == [] and report.status is Status.UNKNOWN and report.exit_code == 3
    # five attempts of the inventory's first call, then the run gave up (placement-group's prefetch and the metric
    # listings retry in threads of their own, and stop at their next attempt once the run has)
    assert len([t for t in by_thread if not t.startswith(("fmdoctor-load-", "fmdoctor-list-"))]) == 4
    assert elapsed < BOUND_S
    deadline = time.monotonic() + BOUND_S  # and the listings end at their next attempt, not five attempts later
    while any(t.name.startswith("fmdoctor-list-") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name.startswith("fmdoctor-list-") for t in threading.enumerate())


def test_every_client_has_bounded_timeouts_and_adaptive_retries():
    """The defaults that keep a real unreachable endpoint from hanging a run; adaptive retries are standard's
    retries and backoff plus a send rate that drops when AWS throttles the run's concurrent calls."""
    client = new_aws(AwsOptions(region=REGION)).client("ec2")
    config = client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (5.0, 30.0)
    assert config.retries == {"mode": "adaptive", "total_max_attempts": 5}


class _SlowFirstListing:
    """A proxy on 127.0.0.1 in front of a moto server: the first DescribeInstances it carries gets no answer
    until the client gives up on it (its read timeout), as an endpoint slower than the timeout; every other
    request, the retry among them, is answered. One request per connection (Connection: close)."""

    def __init__(self, upstream: str):
        self.upstream = upstream.removeprefix("http://")
        self.held = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stop = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            request = _read_request(conn)
            with self._lock:
                hold = b"Action=DescribeInstances" in request and not self.held
                self.held += hold
            if hold:
                conn.settimeout(None)
                while conn.recv(65536):  # until the client's read timeout closes the connection
                    pass
                return
            host, port = self.upstream.split(":")
            with socket.create_connection((host, int(port))) as upstream:
                upstream.sendall(request.replace(b"Connection: keep-alive", b"Connection: close"))
                while chunk := upstream.recv(65536):
                    conn.sendall(chunk)

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    head = b"\r\n".join(line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:"))
    return head + b"\r\nConnection: close\r\n\r\n" + body


@pytest.fixture
def slow_first_listing(retry_sleeps):
    from moto.server import ThreadedMotoServer

    from fmdoctor.demo import moto_compat
    from fmdoctor.demo.builders import ClusterBuilder

    moto_compat.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxy = _SlowFirstListing(f"http://{host}:{port}")
    try:
        import boto3

        ec2 = boto3.Session(region_name=REGION).client("ec2", endpoint_url=f"http://{host}:{port}")
        builder = ClusterBuilder(ec2, CLUSTER)
        builder.vpc("10.0.0.0/16")
        builder.subnet("private-a", "10.0.0.0/20", f"{REGION}a")
        builder.security_group("efa", self_ingress=True, self_egress=True)
        ids = builder.launch([f"gpu-{n}" for n in range(12)], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
        yield proxy, ids
    finally:
        proxy.close()
        server.stop()


def test_why_not_against_an_endpoint_slower_than_the_read_timeout_once_retries_and_answers(slow_first_listing,
                                                                                          retry_sleeps):
    """One DescribeInstances page that takes longer than the read timeout is read again, not a failed why-not."""
    from fmdoctor.net.reachability import why_not

    proxy, ids = slow_first_listing

    def factory(options):
        return new_aws(dataclasses.replace(options, endpoint_url=proxy.url, read_timeout=0.5))

    doctor = Doctor(settings=Settings(), connection=Connection(region=REGION), aws_factory=factory)
    with ThreadPoolExecutor(1) as pool:  # result(timeout) turns a hang into a failure, not a stuck suite
        result = pool.submit(why_not, doctor, CLUSTER, ids[0], ids[1], None, "efa").result(timeout=BOUND_S)
    assert proxy.held == 1  # the first listing was not answered in time
    assert result.reachable is True and result.blocked_by is None
    assert len(retry_sleeps) == 1  # and was retried once
