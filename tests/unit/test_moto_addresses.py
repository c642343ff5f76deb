"""The demo's moto gives each interface of a subnet its own private address, as AWS does (an address belongs to
one interface; https://docs.aws.amazon.com/vpc/latest/userguide/vpc-ip-addressing.html). moto drew each at
random with no look at the ones in use, so in three demos of four two instances shared one, and the one node
identity (rightly) refused to map a Slurm node whose NodeAddr two instances owned."""

from __future__ import annotations

import collections

import boto3
import pytest
from moto import mock_aws

from fmdoctor.demo import moto_compat


@pytest.fixture
def small_subnet():
    moto_compat.install()
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-west-2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        # 27 usable addresses: two of 18 interfaces drawn at random share one in all but 1 run of 500.
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/27")["Subnet"]["SubnetId"]
        yield ec2, subnet


def addresses(ec2) -> collections.Counter[str]:
    return collections.Counter(a["PrivateIpAddress"] for eni in ec2.describe_network_interfaces()["NetworkInterfaces"]
                               for a in eni["PrivateIpAddresses"])


def test_interfaces_of_one_subnet_never_share_an_address(small_subnet):
    ec2, subnet = small_subnet
    for _ in range(18):
        ec2.create_network_interface(SubnetId=subnet)
    used = addresses(ec2)
    assert max(used.values()) == 1
    assert len(used) == 18
    assert not {"10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.31"} & set(used)  # AWS reserves these


def test_an_instance_launch_draws_around_an_address_asked_for(small_subnet):
    ec2, subnet = small_subnet
    for n in range(4, 16):  # the addresses moto's sequential draw for a launch would hand out first
        ec2.create_network_interface(SubnetId=subnet, PrivateIpAddress=f"10.0.0.{n}")
    ec2.run_instances(ImageId="ami-12c6146b", MinCount=3, MaxCount=3, InstanceType="p5.48xlarge", SubnetId=subnet)
    assert max(addresses(ec2).values()) == 1


def test_a_full_subnet_keeps_moto_draw_rather_than_spin():
    """Past FREE_ADDRESS_DRAWS tries the draw stands: the demo never fills a subnet, and a loop must end."""
    draws = iter(["10.0.0.5"] * (moto_compat.FREE_ADDRESS_DRAWS + 1))
    taken = {"10.0.0.5": None}
    assert moto_compat.free_address("10.0.0.0/28", taken, lambda cidr: next(draws)) == "10.0.0.5"
    assert next(draws, None) is None  # drawn once, then FREE_ADDRESS_DRAWS times again


@pytest.mark.parametrize(("drawn", "expected"), [
    (["10.0.0.6"], "10.0.0.6"),  # free at once
    (["10.0.0.5", "10.0.0.6"], "10.0.0.6"),  # in use
    (["10.0.0.0", "10.0.0.3", "10.0.0.15", "10.0.0.4"], "10.0.0.4"),  # the network, AWS's reserved, broadcast
])
def test_a_draw_skips_addresses_in_use_and_reserved(drawn, expected):
    draws = iter(drawn)
    assert moto_compat.free_address("10.0.0.0/28", {"10.0.0.5": None}, lambda cidr: next(draws)) == expected
    assert next(draws, None) is None


def test_the_demo_gives_every_address_one_interface():
    from fmdoctor.demo.runtime import demo_environment

    with demo_environment() as world:
        ec2 = boto3.client("ec2", region_name=world.region)
        assert max(addresses(ec2).values()) == 1
