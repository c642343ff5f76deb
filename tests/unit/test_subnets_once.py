"""Subnets are asked once per run (issue 39): discovery asks for every subnet of the instances' VPCs, and the
network topology reuses them instead of asking DescribeSubnets again; a subnet outside those VPCs (an interface
attached from another VPC) is still fetched by id, and a topology whose VPCs discovery did not cover asks."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from fmdoctor.engine.discovery import _fetch_subnets
from fmdoctor.engine.inventory import Inventory, Subnet, UnavailablePart
from fmdoctor.net.fetch import fetch_topology


@pytest.fixture
def ec2(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-west-2")


def _calls(client) -> list[str]:
    made: list[str] = []
    client.meta.events.register("before-call.ec2.DescribeSubnets", lambda **_: made.append("DescribeSubnets"))
    return made


def test_every_subnet_of_the_vpcs_and_others_by_id(ec2):
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    nodes = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    spare = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.2.0/24")["Subnet"]["SubnetId"]
    other_vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    elsewhere = ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.9.2.0/24")  # neither the VPC's nor named: not asked for
    made = _calls(ec2)
    subnets = _fetch_subnets(ec2, [vpc], [nodes, elsewhere])
    assert set(subnets) == {nodes, spare, elsewhere}
    assert subnets[elsewhere].vpc_id == other_vpc and subnets[spare].cidr == "10.0.2.0/24"
    assert made == ["DescribeSubnets", "DescribeSubnets"]  # the VPC's, then the one outside it by id
    made.clear()
    _fetch_subnets(ec2, [vpc], [nodes])
    assert made == ["DescribeSubnets"]


def _inventory(subnets, vpcs) -> Inventory:
    return Inventory("c", "us-west-2", subnets=subnets, subnets_of_vpcs=vpcs)


def test_subnets_for_only_the_vpcs_discovery_covered():
    a = Subnet("subnet-a", "vpc-a", "us-west-2a", "10.0.1.0/24", "usw2-az1")
    b = Subnet("subnet-b", "vpc-b", "us-west-2a", "10.1.1.0/24", "usw2-az1")
    inventory = _inventory({"subnet-a": a, "subnet-b": b}, ("vpc-a",))
    assert inventory.subnets_for(["vpc-a"]) == {"subnet-a": a}  # subnet-b was fetched by id, not VPC-wide
    assert inventory.subnets_for(["vpc-a", "vpc-b"]) is None
    assert inventory.subnets_for([]) is None
    assert _inventory(UnavailablePart("subnets", None), ()).subnets_for(["vpc-a"]) is None  # type: ignore[arg-type]


def test_the_topology_reuses_the_inventorys_subnets(ec2):
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    nodes = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    made = _calls(ec2)
    known = _fetch_subnets(ec2, [vpc], [nodes])
    inventory = _inventory(known, (vpc,))
    topology = fetch_topology(ec2, "us-west-2", [vpc], (), inventory.subnets_for([vpc]))
    assert made == ["DescribeSubnets"] and topology.subnets == known
    asked = fetch_topology(ec2, "us-west-2", [vpc], ())  # nothing known: the topology asks itself
    assert made == ["DescribeSubnets", "DescribeSubnets"] and asked.subnets == known
