"""The demo cluster: a small p5/p4d training cluster with the faults an on-call engineer meets.

Every fault is planted on purpose and each check family finds its own; the healthy parts are there
too, so false positives would show. Seeding steps are listed in :data:`SEEDERS`, one per family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3

from fmdoctor import demo
from fmdoctor.demo import moto_cloudwatch, moto_ec2, moto_s3
from fmdoctor.demo.builders import ClusterBuilder, LaunchedNode
from fmdoctor.demo.seed_gpu import seed_gpu_metrics
from fmdoctor.demo.seed_health import demo_capacity_block, seed_checkpoints, seed_hyperpod, seed_spot
from fmdoctor.demo.seed_inference import seed_inference
from fmdoctor.demo.seed_network import seed_network
from fmdoctor.demo.seed_prometheus import seed_hyperpod_metrics
from fmdoctor.demo.seed_training import seed_training_logs

DEMO_CLUSTER = demo.DEMO_CLUSTER
DEMO_REGION = "us-west-2"
DEMO_ADMIN_CIDR = "203.0.113.0/24"  # TEST-NET-3: "the on-call engineer's office"


@dataclass
class DemoWorld:
    """What seeding produced: ids the tests and the front ends may want to point at."""

    session: boto3.Session
    cluster: str = DEMO_CLUSTER
    region: str = DEMO_REGION
    builder: ClusterBuilder | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # the demo cluster's fmdoctor.yaml section
    defaults: dict[str, Any] = field(default_factory=dict)  # fmdoctor.yaml's top level (every demo cluster)
    notes: list[str] = field(default_factory=list)  # what a front end should tell the person running the demo
    # moto answers the session's calls in this process (mock_aws, or a ThreadedMotoServer started here), so a
    # seeder may hand bulk data to moto's backend as moto's request handler would, instead of through requests.
    moto_here: bool = False
    _cloudwatch_backend: Any = field(default=None, repr=False)
    _s3_backend: Any = field(default=None, repr=False)

    def cloudwatch_backend(self) -> Any:
        """moto's CloudWatch backend for the session and region when :attr:`moto_here`, else None (publish
        through requests)."""
        if self.moto_here and self._cloudwatch_backend is None:
            self._cloudwatch_backend = moto_cloudwatch.backend_answering(self.session, self.region)
        return self._cloudwatch_backend

    def s3_backend(self) -> Any:
        """moto's S3 backend for the session when :attr:`moto_here`, else None (objects go through requests)."""
        if self.moto_here and self._s3_backend is None:
            self._s3_backend = moto_s3.backend_answering(self.session)
        return self._s3_backend

    def ec2_handler(self) -> Any:
        """moto's EC2 request handler for the session and region when :attr:`moto_here` (launches go straight to
        it: :mod:`fmdoctor.demo.moto_ec2`), else None."""
        if not self.moto_here:
            return None
        account = self.session.client("sts", region_name=self.region).get_caller_identity()["Account"]
        return moto_ec2.handler(account, self.region)

    def launched_nodes(self) -> dict[str, LaunchedNode]:
        """The cluster's nodes by name, as their launch described them."""
        if self.builder is None:
            raise RuntimeError("the nodes are launched by seed_network_and_nodes, which has not run")
        return self.builder.launched


def seed_network_and_nodes(world: DemoWorld) -> None:
    ec2 = world.session.client("ec2", region_name=world.region)
    b = ClusterBuilder(ec2, world.cluster, moto_handler=world.ec2_handler())
    world.builder = b
    b.vpc("10.0.0.0/16")
    b.subnet("private-a", "10.0.0.0/20", f"{world.region}a")
    # A second subnet in the same zone (IP space ran out in private-a): EFA spans subnets of one zone.
    b.subnet("private-a2", "10.0.32.0/20", f"{world.region}a")
    b.subnet("private-b", "10.0.16.0/20", f"{world.region}b")
    b.subnet("public-a", "10.0.128.0/24", f"{world.region}a")
    # Fault: the EFA group admits itself inbound but keeps only the default 0.0.0.0/0 egress,
    # the classic cause of NCCL hangs and failed HyperPod EFA health checks.
    b.security_group("demo-efa", self_ingress=True)
    b.security_group(
        "demo-head",
        ingress=[{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "IpRanges": [{"CidrIp": "10.0.0.0/16"}]}],
    )
    b.placement_group("demo-llm-pg", "cluster")

    b.launch(["head-node"], "m5.8xlarge", "public-a", ["demo-head"], role="head", public_ip=True)
    # p5 capacity bought as a Capacity Block (seed_health's story has it ending soon). Healthy: gpu-node-2 is
    # in the same zone and placement group through private-a2, with EFA-only secondary interfaces.
    block = demo_capacity_block(world, "p5.48xlarge", f"{world.region}a", 2)
    b.launch(["gpu-node-1"], "p5.48xlarge", "private-a", ["demo-efa"], efa_interfaces=32,
             placement_group="demo-llm-pg", capacity_block=block)
    b.launch(["gpu-node-2"], "p5.48xlarge", "private-a2", ["demo-efa"], efa_interfaces=32, efa_only=True,
             placement_group="demo-llm-pg", capacity_block=block)
    # Spot capacity, like gpu-node-6 below: seed_health gives both their Spot notices.
    b.launch(["gpu-node-3"], "p5.48xlarge", "private-a", ["demo-efa"], efa_interfaces=32,
             placement_group="demo-llm-pg", spot=True)
    # Fault: relaunched by hand with only 4 of its 32 EFA interfaces.
    b.launch(["gpu-node-4"], "p5.48xlarge", "private-a", ["demo-efa"], efa_interfaces=4, placement_group="demo-llm-pg")
    # Fault: a p4d added from a launch template that forgot EFA.
    b.launch(["gpu-node-5"], "p4d.24xlarge", "private-a", ["demo-efa"], placement_group="demo-llm-pg")
    # Fault: a replacement node launched in the other AZ's subnet (where Spot capacity was), outside the
    # placement group: EFA traffic can't cross Availability Zones.
    b.launch(["gpu-node-6"], "p5.48xlarge", "private-b", ["demo-efa"], efa_interfaces=32, spot=True)
    world.facts.update(
        vpc=b.vpc_id,
        subnets=dict(b.subnets),
        groups=dict(b.groups),
        nodes=dict(b.nodes),
        placement_group="demo-llm-pg",
    )
    world.settings.setdefault("network", {})["admin_cidrs"] = [DEMO_ADMIN_CIDR]


Seeder = Callable[[DemoWorld], None]

# One step per check family; each adds its part of the story (and its faults) to the same cluster.
# The HyperPod steps come first after the nodes: their Prometheus history is then ready early, and the demo
# starts loading it into Prometheus (on another core) while the rest is seeded.
SEEDERS: tuple[Seeder, ...] = (
    seed_network_and_nodes,
    seed_hyperpod,
    seed_hyperpod_metrics,
    seed_network,
    seed_gpu_metrics,
    seed_checkpoints,
    seed_spot,
    seed_training_logs,
    seed_inference,
)


def seed_demo(session: boto3.Session, seeders: tuple[Seeder, ...] = SEEDERS, *, moto_here: bool = False,
              after_each: Seeder | None = None) -> DemoWorld:
    """The demo's world through ``session``; ``moto_here``: moto answers that session in this process (see
    :attr:`DemoWorld.moto_here`), which seeds the same world faster; ``after_each`` sees the world after each
    seeder (to start what needs only part of it)."""
    world = DemoWorld(session=session, moto_here=moto_here)
    world.settings["region"] = world.region
    for seeder in seeders:
        seeder(world)
        if after_each is not None:
            after_each(world)
    return world
