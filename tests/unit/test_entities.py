"""fmdoctor.engine.entities over inventories as discovery builds them: what a name resolves to, which findings
are on it or involve it, and a miss that says what could not be read instead of 'not found'."""

from __future__ import annotations

import pytest

from fmdoctor.engine import entities as e
from fmdoctor.engine.endpoints import Endpoint
from fmdoctor.engine.errors import AwsFailure, TargetNotFound
from fmdoctor.engine.inventory import HEAD, Instance, Inventory, NetworkInterface, SecurityGroup, UnavailablePart


def _inventory(**parts) -> Inventory:
    head = Instance("i-00000000000000001", "m5.large", "running", "subnet-a", "vpc-1", "us-west-2a",
                    private_ip="10.0.0.5", role=HEAD, tags={"Name": "head-node"}, interface_ids=("eni-1",))
    node = Instance("i-00000000000000003", "p5.48xlarge", "running", "subnet-a", "vpc-1", "us-west-2a",
                    private_ip="10.0.0.7", tags={"Name": "gpu-node-3"}, interface_ids=("eni-3",))
    fields = {
        "interfaces": {"eni-1": NetworkInterface("eni-1", "subnet-a", "vpc-1", ("sg-1",), ("10.0.0.5",)),
                       "eni-3": NetworkInterface("eni-3", "subnet-a", "vpc-1", ("sg-1",), ("10.0.0.7",))},
        "security_groups": {"sg-1": SecurityGroup("sg-1", "llm-efa", "vpc-1")},
        "endpoints": (Endpoint("llm-chat", "arn:chat", "InService"), Endpoint("llm-chat-canary", "arn:c", "Failed")),
        **parts,
    }
    return Inventory("llm", "us-west-2", (head, node), **fields)


@pytest.mark.parametrize("text, kind, entity_id", [
    ("gpu-node-3", e.NODE, "i-00000000000000003"),
    ("i-00000000000000003", e.NODE, "i-00000000000000003"),
    ("10.0.0.7", e.NODE, "i-00000000000000003"),
    ("eni-3", e.NODE, "i-00000000000000003"),
    ("ip-10-0-0-7.ec2.internal", e.NODE, "i-00000000000000003"),  # any DNS form: the resolver's (issue 36)
    ("ip-10-0-0-7", e.NODE, "i-00000000000000003"),
    ("hyperpod-i-00000000000000003", e.NODE, "i-00000000000000003"),
    ("head", e.NODE, "i-00000000000000001"),
    ("llm-efa", e.SECURITY_GROUP, "sg-1"),
    ("llm-chat", e.ENDPOINT, "llm-chat"),
    ("endpoint/llm-chat-canary", e.ENDPOINT, "llm-chat-canary"),
    ("s3://ckpts/run-1/", e.BUCKET, "ckpts"),
])
def test_names_resolve_in_order(text, kind, entity_id):
    entity = e.find_entity(_inventory(), text)
    assert (entity.kind, entity.id) == (kind, entity_id)


def test_a_miss_names_what_was_tried_and_what_is_close():
    with pytest.raises(TargetNotFound) as caught:
        e.find_entity(_inventory(), "gpu-node-9")
    message = caught.value.message
    assert ("'gpu-node-9' is not a node, group, endpoint, file system, job or bucket of cluster llm (tried, in order:"
            in message)
    assert caught.value.hint == "did you mean gpu-node-3?"
    with pytest.raises(TargetNotFound):
        e.find_entity(_inventory(), "ckpts")  # a bare word is never a bucket


def test_a_miss_where_part_of_the_inventory_was_unreadable_says_so():
    denied = UnavailablePart("security_groups", AwsFailure("UnauthorizedOperation", "no", "ec2:DescribeSecurityGroups",
                                                           "access-denied"))
    with pytest.raises(TargetNotFound, match="not verified: security groups could not be read, so it may be there"):
        e.find_entity(_inventory(security_groups=denied), "llm-efa")
    assert e.find_entity(_inventory(security_groups=denied), "gpu-node-3").kind == e.NODE


def test_findings_on_and_involving_a_thing():
    node = e.find_entity(_inventory(), "gpu-node-3")
    chat = e.find_entity(_inventory(), "llm-chat")

    def finding(resource, summary="", **evidence):
        return {"check": "c", "resource": resource, "summary": summary, "evidence": evidence}

    assert e.relation(node, finding("i-00000000000000003")) == e.ON
    assert e.relation(node, finding("sg-1")) == e.INVOLVES  # its security group
    assert e.relation(node, finding("fs-1", instances=["i-00000000000000003"])) == e.INVOLVES
    assert e.relation(node, finding("i-00000000000000001", "head-node (i-00000000000000001)")) is None
    assert e.relation(chat, finding("endpoint/llm-chat/variant/AllTraffic")) == e.ON
    assert e.relation(chat, finding("endpoint/llm-chat-canary", "llm-chat-canary is Failed")) is None
    assert e.concerns_error(node, {"unverified": "GPU idleness of gpu-node-3 (i-00000000000000003)"}, [])
    assert not e.concerns_error(node, {"unverified": "of i-00000000000000001"}, ["i-00000000000000001"])
    assert e.concerns_error(node, {"unverified": "everything gpu-idle checks"}, ["i-00000000000000001"])
