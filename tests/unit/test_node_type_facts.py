"""The on-node instance-type facts agree with what DescribeInstanceTypes answers.

moto serves DescribeInstanceTypes from a catalogue generated from real EC2 responses, so these tests hold
fmdoctor's hand-kept table (fmdoctor/node/instance_facts.py) and EFA list (fmdoctor/node/data/efa_instance_types.txt)
to AWS's own API: a count that disagrees, or an EFA-capable type the list lacks, fails here instead of telling a
node it lacks an EFA its type does not have (or that EFA "does not apply" to a type that supports it).
"""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from fmdoctor.node.instance_facts import KNOWN_TYPES, efa_capable, efa_capable_types, facts_for

# Types the table knows from AWS's pages that the API catalogue does not list (yet): said, never silently skipped.
NOT_IN_THE_API_CATALOGUE = {"p6e-gb200.36xlarge"}


NO_EFA_TYPES = ["c5.2xlarge", "g5.2xlarge", "m7i.2xlarge", "c6i.2xlarge"]  # the issue's: they cannot have EFA


@pytest.fixture(scope="module")
def described() -> dict[str, dict]:
    """The table's types, the no-EFA ones above and every type the API says supports EFA, as DescribeInstanceTypes
    answers for them."""
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-west-2")
        efa = ec2.get_paginator("describe_instance_types").paginate(
            Filters=[{"Name": "network-info.efa-supported", "Values": ["true"]}])
        named = ec2.describe_instance_types(  # under the API's 100 names a call
            InstanceTypes=sorted((set(KNOWN_TYPES) | set(NO_EFA_TYPES)) - NOT_IN_THE_API_CATALOGUE))
        return {t["InstanceType"]: t for page in (*efa, named) for t in page["InstanceTypes"]}


def api_facts(info: dict) -> tuple[int, int | None, int]:
    """(GPUs, Neuron devices or None where the answer has no NeuronInfo, EFA interfaces; 0 when EFA unsupported)."""
    gpus = sum(g["Count"] for g in info.get("GpuInfo", {}).get("Gpus", []))
    neuron = info.get("NeuronInfo")
    devices = sum(d["Count"] for d in neuron["NeuronDevices"]) if neuron else None
    network = info["NetworkInfo"]
    efa = network["EfaInfo"]["MaximumEfaInterfaces"] if network.get("EfaSupported") else 0
    return gpus, devices, efa


@pytest.mark.parametrize("instance_type", sorted(KNOWN_TYPES))
def test_each_known_type_matches_describe_instance_types(instance_type, described):
    facts = KNOWN_TYPES[instance_type]
    if instance_type in NOT_IN_THE_API_CATALOGUE:
        assert instance_type not in described  # when it appears, compare it like the others
        return
    gpus, neuron_devices, efa = api_facts(described[instance_type])
    assert facts.gpus == gpus
    if neuron_devices is not None:
        assert facts.neuron_devices == neuron_devices
    assert facts.max_efa_interfaces == efa
    assert efa_capable(instance_type) is (efa > 0)


def test_p6_b300_has_16_efa_interfaces_because_its_card_0_takes_none(described):
    cards = described["p6-b300.48xlarge"]["NetworkInfo"]["NetworkCards"]
    efa_cards = [c["NetworkCardIndex"] for c in cards if "efa" in c.get("InterfaceTypes", [])]
    assert len(cards) == 17 and 0 not in efa_cards
    assert len(efa_cards) == facts_for("p6-b300.48xlarge").max_efa_interfaces


def test_every_type_the_api_says_supports_efa_is_in_the_efa_list(described):
    api = {name for name, info in described.items() if info["NetworkInfo"].get("EfaSupported")}
    assert api - efa_capable_types() == set()
    # and the list claims EFA for none of the types described here without it
    assert not any(name in efa_capable_types() for name, info in described.items()
                   if not info["NetworkInfo"].get("EfaSupported"))


@pytest.mark.parametrize("instance_type", NO_EFA_TYPES)
def test_types_the_issue_names_cannot_have_efa(instance_type, described):
    assert not described[instance_type]["NetworkInfo"].get("EfaSupported")
    assert efa_capable(instance_type) is False


def test_hyperpod_names_are_the_ec2_types():
    assert facts_for("ml.p5.48xlarge") == facts_for("p5.48xlarge") and efa_capable("ml.p5en.48xlarge") is True
