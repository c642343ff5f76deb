"""bench/rounds.py's instrument: the latency proxy's counts, and throttling answers botocore reads as throttling."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

import fmdoctor

BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench"
pytestmark = pytest.mark.skipif(not (BENCH / "latency_proxy.py").exists(), reason="needs the source tree")


@pytest.fixture(scope="module")
def proxy_module():
    sys.path.insert(0, str(BENCH))
    try:
        import latency_proxy

        yield latency_proxy
    finally:
        sys.path.remove(str(BENCH))
        sys.modules.pop("latency_proxy", None)


def _call(module, op: str, started: float, ended: float):
    return module.Call(op, op + str(started), started, ended)


def test_chain_counts_calls_one_after_another(proxy_module):
    m = proxy_module
    calls = [_call(m, "ec2.DescribeInstances", 0.0, 1.0),
             _call(m, "ec2.DescribeSubnets", 1.0, 2.0), _call(m, "ec2.DescribeSecurityGroups", 1.0, 2.0),
             _call(m, "cloudwatch.GetMetricData", 2.0, 3.0), _call(m, "cloudwatch.GetMetricData", 2.1, 3.1)]
    assert m.chain(calls) == 3 and m.max_in_flight(calls) == 2
    assert m.chain_text(calls) == "DescribeInstances > DescribeSubnets > GetMetricData"
    assert m.chain([]) == 0 and m.max_in_flight([]) == 0


@pytest.fixture(scope="module")
def moto_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.mark.e2e
@pytest.mark.parametrize(("service", "call", "code"), [
    ("ec2", lambda c: c.describe_instances(), "RequestLimitExceeded"),
    ("sqs", lambda c: c.list_queues(), "ThrottlingException"),
    ("cloudwatch", lambda c: c.list_metrics(), "ThrottlingException"),
    ("sts", lambda c: c.get_caller_identity(), "Throttling"),
])
def test_the_proxy_throttles_in_each_protocol(proxy_module, moto_server, monkeypatch, service, call, code):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "bench")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "bench")
    proxy = proxy_module.LatencyProxy(moto_server, throttle_share=1.0)
    try:
        client = boto3.client(service, region_name="us-west-2", endpoint_url=proxy.url,
                              config=Config(retries={"mode": "standard", "total_max_attempts": 1}))
        with pytest.raises(ClientError) as raised:
            call(client)
        assert raised.value.response["Error"]["Code"] == code
        proxy.throttle_share = 0.0
        call(client)  # passed through to moto once the proxy stops throttling
        recorded = proxy.recorder.take()
        assert [c.throttled for c in recorded] == [True, False] and recorded[0].op == recorded[1].op
        assert recorded[0].op.startswith(f"{service}.")
    finally:
        proxy.close()


@pytest.mark.e2e
def test_quick_rounds_run():
    done = subprocess.run([sys.executable, str(BENCH / "rounds.py"), "--quick"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| check | 8 |" in done.stdout and "lost: none" in done.stdout
