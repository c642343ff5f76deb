"""The demo's checkpoint, Spot, Capacity Block and HyperPod story, on top of the network and nodes of the
demo cluster.

The job (a 70B run checkpointing with torch.distributed.checkpoint every 200 steps, about every 30
minutes) hung while saving step 2400 95 minutes ago: that checkpoint has 6 of its 8 shards and no
``.metadata`` (PyTorch DCP writes it last), and nothing was saved since. The evaluation job beside it,
configured to save under ``llama-70b/eval-0412/``, has never saved anything there. Now EC2 is reclaiming Spot
node gpu-node-3 (its request is marked for termination and the interruption warning is in the SQS queue an
EventBridge rule feeds), so the last usable checkpoint, step 2200, is two hours of work behind; Spot node
gpu-node-6 has a rebalance recommendation. gpu-node-1 and gpu-node-2 run in a Capacity Block that ends in
1h50m: EC2 starts terminating them 30 minutes before that, and with checkpoints stopped the work since step
2200 goes with them. Next to it, the team's HyperPod cluster has one worker that failed its deep health check.

Healthy parts stay healthy so false positives would show: the older checkpoints are whole, the queue also
carries an event for another team's instance, an unrelated state-change event and an Auto Scaling
lifecycle-hook message for the node termination handler that shares it, and the other HyperPod nodes are
Running.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3

from fmdoctor.demo import moto_s3
from fmdoctor.demo.moto_capacity import grant_capacity_block
from fmdoctor.demo.moto_health import (
    backdate_launch,
    backdate_s3_object,
    mark_spot_request,
    set_hyperpod_node_status,
)
from fmdoctor.spot.events import INTERRUPTION_EVENT, REBALANCE_EVENT

if TYPE_CHECKING:
    from fmdoctor.demo.scenario import DemoWorld

CHECKPOINT_BUCKET = "demo-llm-train-checkpoints"
CHECKPOINT_PREFIX = "llama-70b/run-0412/"
EVAL_PREFIX = "llama-70b/eval-0412/"  # configured, never written to
SPOT_QUEUE = "demo-spot-events"
HYPERPOD_CLUSTER = "demo-llm-hyperpod"
OTHER_TEAMS_INSTANCE = "i-0f1e2d3c4b5a69788"
CAPACITY_BLOCK_ENDS_IN = timedelta(hours=1, minutes=50)


def demo_capacity_block(world: DemoWorld, instance_type: str, availability_zone: str, count: int) -> str:
    """The Capacity Block the demo's p5 nodes are launched into (bought six days ago, ending soon)."""
    now = datetime.now(UTC)
    reservation = grant_capacity_block(world.session, world.region, instance_type, availability_zone, count,
                                       now - timedelta(days=6), now + CAPACITY_BLOCK_ENDS_IN)
    world.facts["capacity_block"] = {"reservation": reservation, "ends_in": CAPACITY_BLOCK_ENDS_IN}
    return reservation


def dcp_files(shards: int = 8, shard_bytes: int = 16 * 1024) -> dict[str, int]:
    """A torch.distributed.checkpoint folder: one shard per rank, then ``.metadata``, written last."""
    files = {f"__{rank}_0.distcp": shard_bytes for rank in range(shards)}
    files[".metadata"] = 2048
    return files


def write_checkpoint(session: boto3.Session, bucket: str, prefix: str, name: str, files: dict[str, int],
                     written_at: datetime, s3_backend: Any = None) -> None:
    """Upload a checkpoint folder as a job would, file by file a second apart, dated ``written_at``;
    ``s3_backend``: moto's, when moto answers ``session`` in this process (the objects go straight to it,
    as moto's PutObject handler stores them: :mod:`fmdoctor.demo.moto_s3`)."""
    s3 = session.client("s3") if s3_backend is None else None
    for offset, (file_name, size) in enumerate(files.items()):
        key = f"{prefix}{name}/{file_name}"
        _put(s3, s3_backend, bucket, key, b"\0" * size)
        backdate_s3_object(session, bucket, key, written_at + timedelta(seconds=offset))


def _put(s3: Any, backend: Any, bucket: str, key: str, body: bytes) -> None:
    if backend is not None:
        moto_s3.put_object(backend, bucket, key, body)
    else:
        s3.put_object(Bucket=bucket, Key=key, Body=body)


def eventbridge_event(detail_type: str, instance_id: str, time: datetime, region: str, account: str,
                      **detail: str) -> str:
    """An EC2 event as EventBridge delivers it to an SQS target (the message body)."""
    return json.dumps({
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": "aws.ec2",
        "account": account,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:ec2:{region}a:instance/{instance_id}"],
        "detail": {"instance-id": instance_id, **detail},
    })


def asg_lifecycle_message(group: str, instance_id: str, time: datetime, account: str) -> str:
    """What Auto Scaling sends straight to an SQS lifecycle-hook target (no EventBridge envelope): the node
    termination handler's queue carries these beside the EC2 events."""
    return json.dumps({
        "Origin": "AutoScalingGroup", "Destination": "EC2", "LifecycleHookName": "nth-termination",
        "AccountId": account, "RequestId": str(uuid.uuid4()),
        "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING", "AutoScalingGroupName": group,
        "Service": "AWS Auto Scaling", "Time": time.strftime("%Y-%m-%dT%H:%M:%S.000Z"), "EC2InstanceId": instance_id,
        "LifecycleActionToken": str(uuid.uuid4()),
    })


def seed_checkpoints(world: DemoWorld) -> None:
    session, now = world.session, datetime.now(UTC)
    s3 = session.client("s3", region_name=world.region)
    s3.create_bucket(Bucket=CHECKPOINT_BUCKET, CreateBucketConfiguration={"LocationConstraint": world.region})
    backend = world.s3_backend()
    _put(s3, backend, CHECKPOINT_BUCKET, f"{CHECKPOINT_PREFIX}config.yaml", b"model: llama-70b\n")
    _put(s3, backend, CHECKPOINT_BUCKET, f"{CHECKPOINT_PREFIX}tensorboard/events.out.tfevents", b"\0")
    for step, minutes_ago in ((1600, 215), (1800, 185), (2000, 155), (2200, 125)):
        write_checkpoint(session, CHECKPOINT_BUCKET, CHECKPOINT_PREFIX, f"step-{step:06d}", dcp_files(),
                         now - timedelta(minutes=minutes_ago), backend)
    # Fault: the save of step 2400 died after 6 of 8 shards (no .metadata), and nothing came after it.
    partial = {name: size for name, size in dcp_files().items() if name not in {"__6_0.distcp", "__7_0.distcp",
                                                                                 ".metadata"}}
    write_checkpoint(session, CHECKPOINT_BUCKET, CHECKPOINT_PREFIX, "step-002400", partial,
                     now - timedelta(minutes=95), backend)
    location = f"s3://{CHECKPOINT_BUCKET}/{CHECKPOINT_PREFIX}"
    # Fault: the eval job's checkpoint location is configured, but the job has never saved there.
    empty = f"s3://{CHECKPOINT_BUCKET}/{EVAL_PREFIX}"
    world.settings["checkpoints"] = {"locations": [location, empty], "max_age": "1h"}
    world.facts["checkpoints"] = {"location": location, "incomplete": f"{location}step-002400/",
                                  "usable": f"{location}step-002200/", "empty": empty}


def seed_spot(world: DemoWorld) -> None:
    session, now, region = world.session, datetime.now(UTC), world.region
    nodes = world.facts["nodes"]
    account = session.client("sts").get_caller_identity()["Account"]
    sqs = session.client("sqs", region_name=region)
    url = sqs.create_queue(QueueName=SPOT_QUEUE)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = session.client("events", region_name=region)
    events.put_rule(Name="demo-spot-events", EventPattern=json.dumps(
        {"source": ["aws.ec2"], "detail-type": [INTERRUPTION_EVENT, REBALANCE_EVENT]}))
    events.put_targets(Rule="demo-spot-events", Targets=[{"Id": "fmdoctor", "Arn": arn}])

    for name in ("gpu-node-3", "gpu-node-6"):  # the Spot nodes have been up since the job started
        backdate_launch(session, region, nodes[name], now - timedelta(hours=9))
    warned_at = now - timedelta(seconds=20)
    bodies = [
        eventbridge_event(REBALANCE_EVENT, nodes["gpu-node-6"], now - timedelta(minutes=25), region, account),
        eventbridge_event(INTERRUPTION_EVENT, OTHER_TEAMS_INSTANCE, now - timedelta(seconds=40), region, account,
                          **{"instance-action": "terminate"}),
        eventbridge_event("EC2 Instance State-change Notification", nodes["gpu-node-1"],
                          now - timedelta(hours=5), region, account, state="running"),
        asg_lifecycle_message("demo-inference-asg", OTHER_TEAMS_INSTANCE, now - timedelta(minutes=3), account),
        eventbridge_event(INTERRUPTION_EVENT, nodes["gpu-node-3"], warned_at, region, account,
                          **{"instance-action": "terminate"}),
    ]
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body)
    request = mark_spot_request(session, region, nodes["gpu-node-3"], "marked-for-termination",
                                "Spot Instance is marked for termination.", warned_at)
    world.settings["spot"] = {"queue_url": url}
    world.facts["spot"] = {"queue_url": url, "interrupted": nodes["gpu-node-3"], "request": request,
                           "rebalance": nodes["gpu-node-6"]}


def seed_hyperpod(world: DemoWorld) -> None:
    sagemaker = world.session.client("sagemaker", region_name=world.region)
    lifecycle = {"SourceS3Uri": "s3://sagemaker-demo-lifecycle/slurm/", "OnCreate": "on_create.sh"}
    role = "arn:aws:iam::123456789012:role/demo-hyperpod-execution"

    def group(name: str, instance_type: str, count: int) -> dict[str, Any]:
        return {"InstanceGroupName": name, "InstanceType": instance_type, "InstanceCount": count,
                "LifeCycleConfig": lifecycle, "ExecutionRole": role, "ThreadsPerCore": 1}

    sagemaker.create_cluster(
        ClusterName=HYPERPOD_CLUSTER,
        InstanceGroups=[group("controller-machine", "ml.m5.xlarge", 1), group("worker-group-1", "ml.p5.48xlarge", 4)],
        VpcConfig={"SecurityGroupIds": [world.facts["groups"]["demo-efa"]],
                   "Subnets": [world.facts["subnets"]["private-a"]]},
    )
    workers = sagemaker.list_cluster_nodes(ClusterName=HYPERPOD_CLUSTER,
                                           InstanceGroupNameContains="worker-group-1")["ClusterNodeSummaries"]
    failed = workers[2]["InstanceId"]  # the third worker, an EC2 instance id as HyperPod reports it
    # Fault: a worker failed HyperPod's deep health check (GPU memory errors in the DCGM diagnostic).
    set_hyperpod_node_status(world.session, world.region, HYPERPOD_CLUSTER, failed, "Failure",
                             "Deep health check failed: DCGM diagnostic level 2 found GPU memory errors on GPU 3")
    world.settings["hyperpod"] = {"cluster_name": HYPERPOD_CLUSTER}
    world.facts["hyperpod"] = {"cluster": HYPERPOD_CLUSTER, "failed_node": failed}
