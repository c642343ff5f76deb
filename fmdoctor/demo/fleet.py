"""A fleet for tests and the benchmark: many accounts x regions x small EFA clusters, inside moto.

moto keeps one backend per account and maps an assumed role's credentials to the account in the role
ARN (``sts:AssumeRole`` on ``arn:aws:iam::111111111111:role/x`` yields keys that act in 111111111111;
the role need not exist). Seeding assumes a role into each account, exactly as the scan does.

Every cluster runs a training job that ships its output to CloudWatch Logs, in the log group its platform
writes (ParallelCluster: ``/aws/parallelcluster/<cluster>-<timestamp>``; HyperPod:
``/aws/sagemaker/Clusters/<name>/<id>``), and it logged a step a moment ago: training-stalled sees it running.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import boto3

from fmdoctor.demo.builders import ClusterBuilder

FLEET_ROLE = "fmdoctor-read-only"
SEED_ROLE = "fmdoctor-seed"

HEALTHY = "healthy"
EGRESS_MISSING = "egress-missing"  # critical: efa-sg-self-reference
OUTSIDE_PLACEMENT = "outside-placement"  # warning: placement-group


def account_ids(count: int, first: int = 100000000001) -> list[str]:
    return [f"{first + i:012d}" for i in range(count)]


def account_session(session: boto3.Session, account_id: str, region: str = "us-east-1") -> boto3.Session:
    """A session acting in ``account_id`` (moto: credentials of a role assumed there)."""
    sts = session.client("sts", region_name=region)
    creds = sts.assume_role(RoleArn=f"arn:aws:iam::{account_id}:role/{SEED_ROLE}",
                            RoleSessionName="fmdoctor-seed")["Credentials"]
    return boto3.Session(aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                         aws_session_token=creds["SessionToken"], region_name=region)


@dataclass
class FleetWorld:
    accounts: list[str]
    regions: list[str]
    clusters: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (account, region, name) -> fault
    hyperpod: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (account, region, name) -> arn

    def expected_status(self, fault: str) -> str:
        return {HEALTHY: "ok", EGRESS_MISSING: "critical", OUTSIDE_PLACEMENT: "warning"}[fault]


def seed_scope(session: boto3.Session, account: str, region: str, names: Sequence[str],
               faults: Sequence[str], nodes: int = 2) -> None:
    """Clusters of ``nodes`` p4d nodes (4 EFA interfaces each) in one shared VPC of the account/region, with an S3
    gateway endpoint."""
    ec2 = session.client("ec2", region_name=region)
    shared = ClusterBuilder(ec2, "fleet")
    vpc = shared.vpc("10.0.0.0/16")
    # Healthy nodes reach their checkpoints in S3 (s3-unreachable): a gateway endpoint on the VPC's main table.
    shared.s3_gateway_endpoint([shared.main_route_table()], region)
    for index, (name, fault) in enumerate(zip(names, faults, strict=True)):
        b = ClusterBuilder(ec2, name, vpc_id=vpc)
        b.subnet("a", f"10.0.{index * 4}.0/22", f"{region}a")
        b.security_group(f"{name}-efa", self_ingress=True, self_egress=fault != EGRESS_MISSING)
        b.placement_group(f"{name}-pg")
        b.launch([f"{name}-gpu-{i}" for i in range(nodes - 1)], "p4d.24xlarge", "a", [f"{name}-efa"],
                 efa_interfaces=4, placement_group=f"{name}-pg")
        b.launch([f"{name}-gpu-{nodes - 1}"], "p4d.24xlarge", "a", [f"{name}-efa"], efa_interfaces=4,
                 placement_group=None if fault == OUTSIDE_PLACEMENT else f"{name}-pg")
        seed_job_log(session, region, f"/aws/parallelcluster/{name}-202611010000", f"{name}-gpu-0")


def seed_job_log(session: boto3.Session, region: str, group: str, stream: str) -> None:
    """The job's output in ``group``: an ordinary training step logged now (no failure signature)."""
    logs = session.client("logs", region_name=region)
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=[
        {"timestamp": int(time.time() * 1000), "message": "[rank0] step 1200 | loss 2.31 | 182.4 TFLOPS"}])


def seed_fleet(session: boto3.Session, accounts: Sequence[str], regions: Sequence[str], clusters_per_scope: int,
               faults: dict[tuple[str, str, str], str] | None = None, nodes: int = 2) -> FleetWorld:
    """``clusters_per_scope`` clusters named ``c0``.. in every account/region; ``faults`` picks the broken ones."""
    world = FleetWorld(list(accounts), list(regions))
    faults = faults or {}
    for account in accounts:
        acting = account_session(session, account)
        for region in regions:
            names = [f"c{i}" for i in range(clusters_per_scope)]
            chosen = [faults.get((account, region, n), HEALTHY) for n in names]
            seed_scope(acting, account, region, names, chosen, nodes)
            world.clusters.update({(account, region, n): f for n, f in zip(names, chosen, strict=True)})
    return world


def seed_hyperpod(session: boto3.Session, account: str, region: str, name: str) -> str:
    """A HyperPod cluster (moto keeps its nodes in SageMaker, not EC2, as AWS does)."""
    sagemaker = account_session(session, account, region).client("sagemaker", region_name=region)
    group: dict[str, Any] = {
        "InstanceGroupName": "workers", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 1,
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/scripts/", "OnCreate": "on_create.sh"},
        "ExecutionRole": f"arn:aws:iam::{account}:role/hyperpod", "ThreadsPerCore": 1,
    }
    arn = str(sagemaker.create_cluster(ClusterName=name, InstanceGroups=[group])["ClusterArn"])
    seed_job_log(account_session(session, account, region), region,
                 f"/aws/sagemaker/Clusters/{name}/{arn.rsplit('/', 1)[-1]}", "LifecycleConfig/workers/i-0")
    return arn


DEMO_REGIONS = ("us-west-2", "us-east-1")


def seed_demo_fleet(session: boto3.Session) -> FleetWorld:
    """Two accounts x two regions x two clusters: one critical, one warning, the rest healthy."""
    accounts = account_ids(2)
    faults = {(accounts[0], "us-west-2", "c1"): EGRESS_MISSING, (accounts[1], "us-east-1", "c0"): OUTSIDE_PLACEMENT}
    return seed_fleet(session, accounts, DEMO_REGIONS, 2, faults)
