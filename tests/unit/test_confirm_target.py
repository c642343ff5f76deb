"""``fmdoctor ask`` confirms its target with one small DescribeInstances, not the whole inventory the assistant's
checks read again; an unknown target still fails as the inventory fails."""

from __future__ import annotations

from collections import Counter

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.errors import TargetNotFound

from ..conftest import CLUSTER, REGION


@pytest.fixture
def doctor_and_calls():
    made = []

    def factory(options):
        aws = new_aws(options)
        made.append(aws)
        return aws

    doctor = Doctor(settings=Settings(), connection=Connection(region=REGION), aws_factory=factory)
    return doctor, lambda: dict(sum((Counter(aws.calls.snapshot()) for aws in made), Counter()))


def test_a_tagged_cluster_is_confirmed_by_one_small_listing(builder, doctor_and_calls):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch([f"gpu-{n}" for n in range(8)], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    doctor, calls = doctor_and_calls
    doctor.confirm_target(CLUSTER)
    assert calls() == {"ec2.DescribeInstances": 1}  # no groups, subnets, types, endpoints or HyperPod lookups


def test_an_unknown_cluster_fails_as_the_inventory_does(builder, doctor_and_calls):
    doctor, calls = doctor_and_calls
    with pytest.raises(TargetNotFound) as confirmed:
        doctor.confirm_target("no-such-cluster")
    with pytest.raises(TargetNotFound) as listed:
        doctor.inventory("no-such-cluster")
    assert str(confirmed.value) == str(listed.value)
    # Per attempt: the probe of each tag key found nothing, then the listing itself
    assert calls()["ec2.DescribeInstances"] == len(Settings().cluster("x").tag_keys) + 2
