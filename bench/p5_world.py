"""A p5-density training cluster for bench/check_scale.py: p5.48xlarge nodes with 32 EFA interfaces each.

The layout AWS recommends for multi-card EFA types (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
efa-acc-inst-types.html): an ENA primary interface (network card 0, device index 0), an EFA-only interface on
card 0 at device index 1, and one EFA-only interface at device index 0 on each other card: 33 interfaces, 32 of
them EFA (moto keys an instance's interfaces by device index alone, so here card c's EFA-only interface takes
device index c + 1 where AWS would reuse 0 and 1 per card; what DescribeInstances returns per interface is the
same size either way). All in one subnet and one self-referencing EFA group inside a cluster placement
group. It is healthy on purpose: the EFA checks must find nothing wrong with it at any size. Each node is
its own reservation, as Auto Scaling, Karpenter and EKS node groups launch them (one RunInstances or
CreateFleet call per node), so DescribeInstances pages of ``MaxResults`` reservations hold that many nodes.
The network is made through the API; the nodes through moto's RunInstances backend in the server's process,
since writing and parsing each node's 33-interface RunInstances response took minutes per hundred nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import boto3

from fmdoctor.demo.builders import DEMO_AMI, ClusterBuilder

REGION = "us-west-2"
INSTANCE_TYPE = "p5.48xlarge"
EFA_INTERFACES = 32


@dataclass
class P5World:
    cluster: str
    nodes: int
    node_ids: list[str] = field(default_factory=list)
    seed_s: dict[str, float] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        return {}


def interfaces(subnet: str, group: str) -> list[dict[str, Any]]:
    """RunInstances' NetworkInterfaces for one p5 node: the ENA primary, then an EFA-only interface per card."""
    common = {"SubnetId": subnet, "Groups": [group]}
    return [{"DeviceIndex": 0, "NetworkCardIndex": 0, "InterfaceType": "interface", **common}] + [
        {"DeviceIndex": card + 1, "NetworkCardIndex": card, "InterfaceType": "efa-only", **common}
        for card in range(EFA_INTERFACES)]


def seed_p5_world(session: boto3.Session, cluster: str, nodes: int, clock: Any) -> P5World:
    world = P5World(cluster, nodes)
    ec2 = session.client("ec2")
    started = clock()
    b = ClusterBuilder(ec2, cluster)
    b.vpc("10.0.0.0/16")
    subnet = b.subnet("nodes", "10.0.0.0/16", f"{REGION}a")  # 2,048 x 32 interfaces need a /16
    group = b.security_group("efa", self_ingress=True, self_egress=True)
    b.placement_group("pg")
    backend = _ec2_backend(session)
    nics = interfaces(subnet, group)
    for _ in range(nodes):  # RunInstances' own work, without a 33-interface XML response to write and read
        reservation = backend.run_instances(DEMO_AMI, 1, None, [], **_run_instances_kwargs(nics, cluster))
        for instance in reservation.instances:
            instance.placement.group_name = "pg"
            world.node_ids.append(instance.id)
    world.seed_s["ec2"] = clock() - started
    return world


def _ec2_backend(session: boto3.Session) -> Any:
    """moto's EC2 backend for the session's account and region (the caller runs the moto server in-process)."""
    from moto.ec2.models import ec2_backends

    account = session.client("sts").get_caller_identity()["Account"]
    return ec2_backends[account][REGION]


def _run_instances_kwargs(nics: list[dict[str, Any]], cluster: str) -> dict[str, Any]:
    """What moto's RunInstances response handler passes its backend for this request."""
    return {
        "instance_type": INSTANCE_TYPE, "is_instance_type_default": False, "placement": None,
        "placement_hostid": None, "region_name": REGION, "subnet_id": None, "key_name": None,
        "security_group_ids": [], "nics": [dict(n) for n in nics], "private_ip": None, "associate_public_ip": None,
        "tags": {"instance": {"fmdoctor:cluster": cluster}}, "ebs_optimized": False, "disable_api_stop": False,
        "instance_market_options": {}, "instance_initiated_shutdown_behavior": None, "launch_template": {},
        "hibernation_options": {}, "iam_instance_profile_name": None, "iam_instance_profile_arn": None,
        "monitoring_state": "disabled", "ipv6_address_count": None, "metadata_options": {}, "client_token": "ABCDE",
    }
