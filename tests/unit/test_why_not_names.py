"""`fmdoctor why-not` resolves names in its documented order (instance Name tag or id, address or CIDR, ENI,
internet/FSx/S3), takes a bucket only as s3://bucket, and on no match says what it tried and what is close."""

from __future__ import annotations

import json

import boto3
import pytest

from fmdoctor.cli.main import main

REGION = "us-west-2"


@pytest.fixture
def nodes(builder):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["head-node"], "m5.large", "public-a", ["efa"], role="head")
    builder.launch(["gpu-node-1", "gpu-node-6"], "m5.large", "private-a", ["efa"])
    builder.s3_gateway_endpoint([builder.main_route_table()], REGION)
    boto3.client("s3", region_name=REGION).create_bucket(
        Bucket="llm-checkpoints", CreateBucketConfiguration={"LocationConstraint": REGION})
    return builder


def why_not(capsys, *argv):
    code = main(["why-not", "--cluster", "test-cluster", "--region", REGION, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_mistyped_node_says_what_was_tried_and_what_is_close(nodes, capsys):
    code, out, err = why_not(capsys, "--from", "gpu-node-9", "--to", "head", "--port", "22")
    assert code == 3 and out == ""
    assert "'gpu-node-9' is not an instance, address, interface, file system or s3:// URI" in err
    assert ("tried, in order: an instance's Name tag, id or DNS name (3 instances), 'head', an IPv4 address or "
            "CIDR") in err
    assert "hint: did you mean gpu-node-6?" in err
    assert "bucket" not in err.split("hint:")[1]  # never read as an S3 bucket


def test_an_ec2_hostname_of_no_node_is_never_a_bucket(nodes, capsys):
    code, out, err = why_not(capsys, "--from", "ip-10-0-250-250.ec2.internal", "--to", "head", "--port", "22")
    assert code == 3 and out == ""
    assert "no network interface has 10.0.250.250, the address 'ip-10-0-250-250.ec2.internal' spells" in err
    assert "bucket" not in err


def test_a_bucket_is_only_an_s3_uri(nodes, capsys):
    code, _, err = why_not(capsys, "--from", "gpu-node-1", "--to", "llm-checkpoints", "--port", "443")
    assert code == 3 and "'llm-checkpoints' is not an instance" in err
    assert "hint: a bucket is named as s3://llm-checkpoints" in err
    code, out, _ = why_not(capsys, "--from", "gpu-node-1", "--to", "s3://llm-checkpoints", "--format", "json")
    result = json.loads(out)
    assert code == 0 and result["destination"]["kind"] == "s3" and result["port"] == 443


def test_s3_takes_only_its_own_ports(nodes, capsys):
    code, out, err = why_not(capsys, "--from", "gpu-node-1", "--to", "s3://llm-checkpoints", "--port", "22")
    assert code == 3 and out == "" and "S3 answers only on tcp/443" in err


def test_name_id_address_and_interface_name_the_same_node(nodes, capsys):
    instance = nodes.nodes["gpu-node-6"]
    [raw] = nodes.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"]
    short = "ip-" + raw["PrivateIpAddress"].replace(".", "-")
    spellings = ["gpu-node-6", instance, raw["PrivateIpAddress"], raw["NetworkInterfaces"][0]["NetworkInterfaceId"],
                 raw["PrivateDnsName"], short, f"{short}.ec2.internal"]  # DNS names under any domain (issue 36)
    sources = set()
    for spelling in spellings:
        code, out, err = why_not(capsys, "--from", spelling, "--to", "head", "--port", "22", "--format", "json")
        assert code in (0, 2), err
        sources.add(json.loads(out)["source"]["resource"])
    assert sources == {raw["NetworkInterfaces"][0]["NetworkInterfaceId"]}


def test_to_the_internet_the_nat_and_s3_endpoint_ways_are_reported_apart(builder, capsys):
    """A private subnet reaches the internet through a NAT gateway and S3's prefix list through a gateway
    endpoint: two ways out, each with its own hops, not one merged list."""
    builder.internet_gateway(["public-a"])
    nat = builder.nat_gateway("public-a")
    builder.route_table("private", ["private-a"], [{"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": nat}])
    endpoint = builder.s3_gateway_endpoint(["private"], REGION)
    builder.security_group("app")
    builder.launch(["app-1"], "m5.large", "private-a", ["app"])
    code, out, _ = why_not(capsys, "--from", "app-1", "--to", "internet", "--port", "443", "--format", "json")
    hops = json.loads(out)["hops"]
    ways = list(dict.fromkeys(h["path"] for h in hops if h["path"]))
    assert code == 0 and len(ways) == 2
    assert ways[0].startswith("part of the internet") and ways[0].endswith(f"via NAT gateway {nat}")
    assert ways[1].startswith("S3 (pl-") and ways[1].endswith(f"via gateway endpoint {endpoint}")
    by_way = {w: [h["component"] for h in hops if h["path"] == w] for w in ways}
    assert "nat-gateway" in by_way[ways[0]] and "vpc-endpoint" not in by_way[ways[0]]
    assert "vpc-endpoint" in by_way[ways[1]] and "nat-gateway" not in by_way[ways[1]]
    assert [h["path"] for h in hops][:3] == [None] * 3 and hops[-1]["path"] is None  # shared hops: no way
    code, out, _ = why_not(capsys, "--from", "app-1", "--to", "internet", "--port", "443")
    assert "  way 1 of 2: part of the internet" in out and "  way 2 of 2: S3 (pl-" in out
    code, out, _ = why_not(capsys, "--from", "app-1", "--to", "s3", "--format", "json")
    assert {h["path"] for h in json.loads(out)["hops"]} == {None}  # one way: nothing to tell apart
