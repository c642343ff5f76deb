"""One small healthy cluster that every fault-injection test breaks in its own way.

Three p4d nodes (4 EFA interfaces each) in one placement group, one of them Spot, with the CloudWatch
agent's GPU metrics, a checkpoint location holding fresh whole checkpoints and a Spot event queue: each
check family has something to read, so a fault in one source shows exactly what it takes away.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fmdoctor.demo.metrics import A100_40GB, MetricsPublisher
from fmdoctor.demo.seed_health import dcp_files, write_checkpoint

from ...conftest import REGION

BUCKET = "fault-ckpt"
LOCATION = f"s3://{BUCKET}/run/"
FAMILIES = {
    "placement": ["placement-group"],
    "gpu": ["gpu-metrics-missing", "gpu-idle", "gpu-straggler", "gpu-memory-pressure"],
    "checkpoint": ["checkpoint-missing", "checkpoint-stale", "checkpoint-incomplete"],
    "spot": ["spot-interruption", "spot-rebalance", "spot-interruption-unprotected"],
}


@dataclass
class World:
    session: Any
    nodes: dict[str, str]
    settings: dict[str, Any]

    def save_checkpoint(self, step: int, written_at: datetime) -> None:
        write_checkpoint(self.session, BUCKET, "run/", f"step-{step:06d}", dcp_files(shards=2), written_at)


@pytest.fixture
def world(aws, builder) -> World:
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.placement_group("pg")
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4, placement_group="pg")
    builder.launch(["gpu-3"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4, placement_group="pg",
                   spot=True)
    now = datetime.now(UTC)
    publish = MetricsPublisher(aws.client("cloudwatch"), now)
    for node in builder.launched.values():
        publish.gpu_node(node.id, node.private_ip, 92.0, gpu=A100_40GB, instance_type="p4d.24xlarge")
    publish.flush()
    aws.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    queue = aws.client("sqs").create_queue(QueueName="spot-events")["QueueUrl"]
    w = World(aws, dict(builder.nodes), {
        "gpu": {"startup_grace": "0s"},
        "checkpoints": {"locations": [LOCATION], "max_age": "1h"},
        "spot": {"queue_url": queue},
    })
    w.save_checkpoint(100, now - timedelta(minutes=40))
    w.save_checkpoint(200, now - timedelta(minutes=10))
    return w


@pytest.fixture
def run_world(world, run_with_faults):
    """Run the given check families (all four by default) over the world, with the test's faults attached."""

    def run(*families: str):
        ids = [c for family in (families or FAMILIES) for c in FAMILIES[family]]
        return run_with_faults(ids, **world.settings)

    return run
