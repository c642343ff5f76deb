"""A synthetic GPU training cluster of any size for bench/check_scale.py, seeded into a moto server.

Each node is a p4d.24xlarge (8 A100s) with its 4 EFA interfaces in one subnet and one self-referencing
EFA group, inside one cluster placement group; every 8th node is Spot. Around them: an S3 gateway
endpoint (so s3-unreachable has a path), a checkpoint location with fresh whole checkpoints, a Spot
event queue fed as EventBridge would feed it, and the CloudWatch agent's per-GPU metrics for every
node. Two faults are planted so a run must still find them at any size: node 0 idles (gpu-idle) and
the first Spot node has a rebalance recommendation in the queue (spot-rebalance).

Everything goes through ordinary API calls to the server (AWS_ENDPOINT_URL), batched the way a person
with a script would batch them: RunInstances of up to 500 instances, PutMetricData of 1,000 datums.
Only what no customer API can do (dating checkpoints in the past) touches moto's in-process backend,
as the demo does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from fmdoctor.demo.builders import DEMO_AMI, ClusterBuilder
from fmdoctor.demo.metrics import A100_40GB, MetricsPublisher, describe_nodes
from fmdoctor.demo.seed_health import dcp_files, eventbridge_event, write_checkpoint
from fmdoctor.spot.events import REBALANCE_EVENT

REGION = "us-west-2"
INSTANCE_TYPE = "p4d.24xlarge"
GPUS = 8
EFA_INTERFACES = 4
SPOT_EVERY = 8
RUN_INSTANCES_MAX = 500
BUCKET = "bench-checkpoints"
PREFIX = "llm/run-1/"


@dataclass
class ScaleWorld:
    cluster: str
    nodes: int
    node_ids: list[str] = field(default_factory=list)
    spot_ids: list[str] = field(default_factory=list)
    queue_url: str = ""
    seed_s: dict[str, float] = field(default_factory=dict)

    @property
    def planted(self) -> set[tuple[str, str]]:
        """(check, resource) of the faults seeded on purpose."""
        return {("gpu-idle", self.node_ids[0]), ("spot-rebalance", self.spot_ids[0])}

    def settings(self) -> dict[str, Any]:
        """This cluster's fmdoctor.yaml section."""
        return {
            "gpu": {"startup_grace": "0s"},
            "checkpoints": {"locations": [f"s3://{BUCKET}/{PREFIX}"], "max_age": "1h"},
            "spot": {"queue_url": self.queue_url},
        }


def seed_world(session: boto3.Session, cluster: str, nodes: int, clock: Any) -> ScaleWorld:
    """Seed the cluster; ``clock()`` returns seconds (perf_counter) so each phase's cost is reported."""
    world = ScaleWorld(cluster, nodes)
    ec2 = session.client("ec2")
    started = clock()
    b = ClusterBuilder(ec2, cluster)
    b.vpc("10.0.0.0/16")
    b.subnet("nodes", "10.0.0.0/17", f"{REGION}a")
    b.route_table("private", ["nodes"])
    b.s3_gateway_endpoint(["private"], REGION)
    group = b.security_group("efa", self_ingress=True, self_egress=True)
    b.placement_group("pg")
    spot = max(1, nodes // SPOT_EVERY)
    world.spot_ids = _launch(ec2, cluster, b.subnets["nodes"], group, spot, spot=True)
    world.node_ids = _launch(ec2, cluster, b.subnets["nodes"], group, nodes - spot, spot=False) + world.spot_ids
    world.seed_s["ec2"] = clock() - started

    started = clock()
    now = datetime.now(UTC)
    publish = MetricsPublisher(session.client("cloudwatch"), now, region=REGION)
    for node in describe_nodes(ec2, {i: i for i in world.node_ids}):
        publish.gpu_node(node.id, node.private_ip, 2.0 if node.id == world.node_ids[0] else 93.0,
                         gpu=A100_40GB, instance_type=INSTANCE_TYPE, gpus=GPUS)
    publish.flush()
    world.seed_s["cloudwatch"] = clock() - started

    started = clock()
    s3 = session.client("s3")
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    for step, minutes_ago in ((100, 50), (200, 20)):
        write_checkpoint(session, BUCKET, PREFIX, f"step-{step:06d}", dcp_files(shards=8),
                         now - timedelta(minutes=minutes_ago))
    sqs = session.client("sqs")
    world.queue_url = sqs.create_queue(QueueName=f"{cluster}-spot-events")["QueueUrl"]
    account = session.client("sts").get_caller_identity()["Account"]
    sqs.send_message(QueueUrl=world.queue_url, MessageBody=eventbridge_event(
        REBALANCE_EVENT, world.spot_ids[0], datetime.now(UTC), REGION, account))  # after the launch
    world.seed_s["s3+sqs"] = clock() - started
    return world


def _launch(ec2: Any, cluster: str, subnet: str, group: str, count: int, spot: bool) -> list[str]:
    interfaces = [{"DeviceIndex": card, "NetworkCardIndex": card, "SubnetId": subnet, "Groups": [group],
                   "InterfaceType": "efa"} for card in range(EFA_INTERFACES)]
    ids: list[str] = []
    for start in range(0, count, RUN_INSTANCES_MAX):
        batch = min(RUN_INSTANCES_MAX, count - start)
        kwargs: dict[str, Any] = {
            "ImageId": DEMO_AMI, "InstanceType": INSTANCE_TYPE, "MinCount": batch, "MaxCount": batch,
            "NetworkInterfaces": interfaces, "Placement": {"GroupName": "pg"},
            "TagSpecifications": [{"ResourceType": "instance",
                                   "Tags": [{"Key": "fmdoctor:cluster", "Value": cluster}]}],
        }
        if spot:
            kwargs["InstanceMarketOptions"] = {"MarketType": "spot"}
        ids += [i["InstanceId"] for i in ec2.run_instances(**kwargs)["Instances"]]
    return ids
