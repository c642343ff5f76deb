"""A 200 answer that is not whole: cut short on the wire, cut short with a matching Content-Length, or broken.

A loopback proxy on 127.0.0.1 sits between the engine and moto's ThreadedMotoServer and damages the answers of
one AWS service at a time, so the real transport (urllib3's Content-Length checks), botocore's real parsers and
the engine's error handling all run. Whatever the damage, no check that read the service may say it is healthy,
not applicable, or show a raw body: each says what it could not verify.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.builders import ClusterBuilder
from fmdoctor.demo.endpoint_builder import EndpointBuilder
from fmdoctor.demo.metrics import A100_40GB, MetricsPublisher
from fmdoctor.demo.seed_gpu import EFA_COUNTERS
from fmdoctor.demo.seed_health import dcp_files, write_checkpoint
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import Report
from fmdoctor.loopback import KeepAliveHandler, serve_in_background

from ...conftest import CLUSTER, REGION

SCOPE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")  # the SigV4 signing name


@dataclass
class Damage:
    service: str | None = None  # the signing name whose answers are damaged
    how: str = "cut"  # cut: half the body, honest Content-Length; short: half the body, original length; broken
    damaged: list[str] = field(default_factory=list)


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.damage = Damage()
        super().__init__(("127.0.0.1", 0), _Forward)


class _Forward(KeepAliveHandler):
    server: _Proxy

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = http.client.HTTPConnection(self.server.upstream.hostname, self.server.upstream.port, timeout=30)
        upstream.request(self.command, self.path, body, {k: v for k, v in self.headers.items()})
        answer = upstream.getresponse()
        data = answer.read()
        headers = [(k, v) for k, v in answer.getheaders() if k.lower() not in ("content-length", "connection",
                                                                               "transfer-encoding")]
        upstream.close()
        scope = SCOPE.search(self.headers.get("Authorization", ""))
        damage = self.server.damage
        hit = scope is not None and scope.group(1) == damage.service and 200 <= answer.status < 300 and data
        length = len(data)
        if hit:
            damage.damaged.append(self.path)
            if damage.how == "broken":
                data = data[: len(data) // 2] + (b"<<oops & >" if data.lstrip().startswith(b"<") else b'{"x": [')
                data += data[len(data) // 2:]
                length = len(data)
            else:
                data = data[: len(data) // 2]
                length = len(data) if damage.how == "cut" else length
        self.send_response(answer.status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        if hit and damage.how == "short":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _forward


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[_Proxy, dict[str, Any]]]:
    """A small healthy cluster in moto behind the proxy: EFA nodes with GPU metrics, an FSx for Lustre file
    system they reach, fresh checkpoints, a Spot queue, and a SageMaker endpoint tagged with the cluster, with
    traffic."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxy = _Proxy(f"http://{host}:{port}")
    serve_in_background(proxy)
    with pytest.MonkeyPatch.context() as patch:  # the seeding talks to moto directly, the engine through the proxy
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        session = boto3.Session(region_name=REGION)
        builder = ClusterBuilder(session.client("ec2"), CLUSTER)
        builder.vpc("10.0.0.0/16")
        builder.subnet("private-a", "10.0.0.0/20", f"{REGION}a")
        builder.route_table("private", ["private-a"])
        builder.s3_gateway_endpoint(["private"], REGION)
        efa = builder.security_group("efa", self_ingress=True, self_egress=True)
        lustre = [{"IpProtocol": "tcp", "FromPort": low, "ToPort": high, "UserIdGroupPairs": [{"GroupId": group}]}
                  for low, high in ((988, 988), (1018, 1023)) for group in [efa]]
        # FSx for Lustre's file servers reach each other through the group itself (AWS, "File system access
        # control with Amazon VPC"): all traffic from itself, and Lustre from the clients' group.
        fsx_group = builder.security_group("fsx", ingress=lustre, self_ingress=True)
        builder.ec2.authorize_security_group_ingress(GroupId=efa, IpPermissions=[
            {**rule, "UserIdGroupPairs": [{"GroupId": fsx_group}]} for rule in lustre])
        session.client("fsx").create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200,
                                                 SubnetIds=[builder.subnets["private-a"]],
                                                 SecurityGroupIds=[fsx_group])
        builder.placement_group("pg")
        builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4,
                       placement_group="pg")
        builder.launch(["gpu-3"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4, placement_group="pg",
                       spot=True)
        now = datetime.now(UTC)
        publish = MetricsPublisher(session.client("cloudwatch"), now)
        for node in builder.launched.values():
            publish.gpu_node(node.id, node.private_ip, 92.0, gpu=A100_40GB, instance_type="p4d.24xlarge")
            for card, eni in enumerate(node.efa_enis()):  # the agent's EFA counters, all quiet
                publish.efa_interface(eni, f"rdmap{16 + card}s27", metrics=EFA_COUNTERS)
        publish.flush()
        session.client("s3").create_bucket(Bucket="ckpt-bucket",
                                           CreateBucketConfiguration={"LocationConstraint": REGION})
        for step, age in ((100, 40), (200, 10)):
            write_checkpoint(session, "ckpt-bucket", "run/", f"step-{step:06d}", dcp_files(shards=2),
                             now - timedelta(minutes=age))
        queue = session.client("sqs").create_queue(QueueName="spot-events")["QueueUrl"]
        endpoints = EndpointBuilder(session, cluster=CLUSTER)
        endpoints.endpoint("chat", "ml.g4dn.2xlarge")
        endpoints.traffic("chat", now, invocations=600.0, model_latency_us={80_000.0: 100},
                          overhead_latency_us={5_000.0: 100}, gpu_utilization=40.0, gpu_memory_utilization=50.0)
        settings = {"gpu": {"startup_grace": "0s"}, "checkpoints": {"locations": ["s3://ckpt-bucket/run/"],
                    "max_age": "1h"}, "spot": {"queue_url": queue}}
    try:
        yield proxy, settings
    finally:
        proxy.shutdown()
        server.stop()


def run(proxy: _Proxy, settings: dict[str, Any], only: list[str] | None = None) -> Report:
    config = Settings.model_validate({"clusters": {CLUSTER: settings}})
    endpoint = f"http://127.0.0.1:{proxy.server_address[1]}"
    doctor = Doctor(settings=config, connection=Connection(region=REGION, endpoint_url=endpoint))
    return doctor.check(CLUSTER, only=only)


def test_the_undamaged_world_is_verified_healthy(world):
    proxy, settings = world
    proxy.damage = Damage()
    report = run(proxy, settings)
    # CloudWatch carries no Xid metric (gpu-xid-metrics' design): the one thing this world cannot verify.
    assert [(e.check, e.code) for e in report.errors] == [("gpu-xid-metrics", "NoXidMetric")], report.errors
    assert report.findings == [], report.findings
    assert {"checkpoint-stale", "inference-errors", "efa-sg-self-reference", "fsx-unreachable"} <= set(
        report.stats.checks_run)


# The services a run reads, by signing name, and the checks that must then say they could not verify.
READERS = {
    "ec2": None,  # the instance listing identifies the cluster: the whole run is unknown
    "sagemaker": ["endpoint-unhealthy", "inference-latency-slo", "inference-errors", "inference-idle"],
    "tagging": ["endpoint-unhealthy", "inference-latency-slo", "inference-errors", "inference-idle"],
    "s3": ["checkpoint-missing", "checkpoint-stale", "checkpoint-incomplete"],
    "sqs": ["spot-interruption", "spot-rebalance"],
    "fsx": ["fsx-unreachable"],
    "monitoring": ["gpu-idle", "gpu-straggler", "gpu-memory-pressure", "inference-errors", "inference-latency-slo"],
}


@pytest.mark.parametrize("how", ["cut", "short", "broken"])
@pytest.mark.parametrize("service", sorted(READERS))
def test_a_damaged_answer_is_never_read_as_healthy(world, service, how):
    proxy, settings = world
    proxy.damage = Damage(service, how)
    try:
        report = run(proxy, settings, READERS[service] or ["efa-sg-self-reference"])
    finally:
        damaged = list(proxy.damage.damaged)
        proxy.damage = Damage()
    assert damaged, f"nothing of {service} was damaged: the test proves nothing"
    readers = READERS[service] or ["inventory"]  # the instance listing identifies the cluster: nothing could run
    assert report.status.value == "unknown" if READERS[service] is None else report.status.value != "ok"
    errors = {e.check for e in report.errors}
    for check in readers:
        assert check in errors, (check, report.errors, [s.check for s in report.skipped])
    for error in report.errors:
        assert error.code == "CorruptResponse", error
        assert len(error.message) < 400 and "<" not in error.message and "{" not in error.message
