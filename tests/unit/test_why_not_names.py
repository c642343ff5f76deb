"""`fmdoctor why-not` resolves names in its documented order (instance Name tag or id, address or CIDR, ENI,
internet/FSx/S3), takes a bucket only as s3://bucket, and on no match says what it tried and what is close."""

from __future__ import annotations

import json

import boto3
import pytest

from fmdoctor.cli.main import main

pytestmark = pytest.mark.usefixtures("no_default_amis")

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
    assert "tried, in order: an instance's Name tag or id (3 instances), 'head', an IPv4 address or CIDR" in err
    assert "hint: did you mean gpu-node-6?" in err
    assert "bucket" not in err.split("hint:")[1]  # never read as an S3 bucket


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
    spellings = ["gpu-node-6", instance, raw["PrivateIpAddress"], raw["NetworkInterfaces"][0]["NetworkInterfaceId"]]
    sources = set()
    for spelling in spellings:
        code, out, err = why_not(capsys, "--from", spelling, "--to", "head", "--port", "22", "--format", "json")
        assert code in (0, 2), err
        sources.add(json.loads(out)["source"]["resource"])
    assert sources == {raw["NetworkInterfaces"][0]["NetworkInterfaceId"]}
