"""All-pairs EFA verdicts by equivalence blocks equal per-pair evaluation, on random worlds.

fmdoctor.net.classes.evaluate_efa_classes evaluates one class pair per ordered pair of blocks (classes with the
same security groups in one zone and VPC) and gives every other pair that verdict and blocker. Here random
worlds (subnets over VPCs and zones, some not described or without a zone; groups with all-traffic, port and
CIDR rules, some not fetched; interfaces with no group, one or several in any order) are judged both ways:
evaluate_classes on every pair EFA should join, and the blocks. Pairs, order, verdicts, blockers, each pair's
path, islands, and efa-peer-unreachable's findings must all be the same.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from fmdoctor.checks._net import by_blocker, efa_classes
from fmdoctor.checks.efa_peer_unreachable import EFA, EfaPeerUnreachable
from fmdoctor.config import ClusterSettings
from fmdoctor.engine.context import CheckContext, RunScope
from fmdoctor.engine.inventory import Instance, Inventory, NetworkInterface, SecurityGroup, SgRule, Subnet
from fmdoctor.net.classes import (
    blocked_outcomes,
    evaluate_classes,
    evaluate_efa_classes,
    interface_classes,
    islands,
    unverified_outcomes,
)
from fmdoctor.net.efa import needs_pair
from fmdoctor.net.network import Network
from fmdoctor.net.topology import Topology

GROUPS = [f"sg-{k}" for k in range(6)]


def random_world(rng: random.Random) -> Inventory:
    subnets = {}
    for k in range(rng.randint(2, 6)):
        zone = rng.choice(["us-west-2a", "us-west-2b", ""]) if rng.random() < 0.1 else rng.choice(
            ["us-west-2a", "us-west-2b"])
        subnets[f"subnet-{k}"] = Subnet(f"subnet-{k}", rng.choice(["vpc-1", "vpc-1", "vpc-2"]), zone,
                                        f"10.{k}.0.0/16", f"usw2-az{zone[-1]}" if zone and rng.random() < 0.5 else "")
    subnet_ids = [*subnets, "subnet-undescribed"]
    groups = {}
    for gid in GROUPS[: rng.randint(2, len(GROUPS))]:
        rules = []
        for r in range(rng.randint(0, 4)):
            egress = rng.random() < 0.5
            protocol = rng.choice(["-1", "-1", "tcp"])
            ports = {"from_port": 0, "to_port": 65535} if protocol == "tcp" else {}
            if rng.random() < 0.8:
                rules.append(SgRule(f"sgr-{gid}-{r}", gid, egress, protocol, referenced_group_id=rng.choice(GROUPS),
                                    **ports))
            else:
                rules.append(SgRule(f"sgr-{gid}-{r}", gid, egress, protocol, cidr_ipv4="0.0.0.0/0", **ports))
        groups[gid] = SecurityGroup(gid, f"name-{gid}", "vpc-1", tuple(rules))
    instances, interfaces = [], {}
    for n in range(rng.randint(2, 14)):
        ids = []
        for k in range(rng.randint(1, 3)):
            subnet = rng.choice(subnet_ids)
            chosen = tuple(rng.sample(GROUPS, rng.choice([0, 1, 1, 1, 2, 2, 3])))
            eni = NetworkInterface(f"eni-{n}-{k}", subnet, "vpc-1", chosen, (f"10.9.{n}.{k + 4}",),
                                   interface_type="efa", instance_id=f"i-{n}", device_index=k, network_card_index=k)
            interfaces[eni.id] = eni
            ids.append(eni.id)
        first = interfaces[ids[0]]
        instances.append(Instance(f"i-{n}", "p5.48xlarge", "running", first.subnet_id, "vpc-1", None,
                                  tags={"Name": f"gpu-{n}"} if n % 2 else {}, interface_ids=tuple(ids)))
    return Inventory(cluster="c", region="us-west-2", instances=tuple(instances), interfaces=interfaces,
                     security_groups=groups, subnets=subnets)


def _outcome_facts(outcomes):
    return [(o.source.key, o.destination.key, o.reachable, o.blocked_by) for o in outcomes]


@pytest.mark.parametrize("seed", range(150))
def test_block_verdicts_equal_per_pair_verdicts(seed):
    inventory = random_world(random.Random(seed))
    network = Network.build(inventory, Topology(region="us-west-2"))
    classes = interface_classes(network, inventory.efa_interfaces(), by_public_ip=False, what="EFA interface")
    per_pair = evaluate_classes(network, classes, classes, EFA,
                                skip=lambda a, b: not needs_pair(network.subnets, a, b))
    blocks = evaluate_efa_classes(network, classes, EFA)
    by_blocks = blocks.graph()

    assert list(by_blocks.edges) == list(per_pair.edges)  # the same pairs, in the same order
    for a, b, data in per_pair.edges(data=True):
        [expected] = data["outcomes"]  # EFA never splits a class
        [got] = by_blocks.edges[a, b]["outcomes"]
        assert by_blocks.edges[a, b]["reachable"] == data["reachable"]
        assert (got.reachable, got.blocked_by) == (expected.result.reachable, expected.result.blocked_by)
        assert got.result == expected.result  # the pair's own path, hop by hop, when read
    assert _outcome_facts(blocks.blocked_outcomes()) == _outcome_facts(blocked_outcomes(per_pair))
    assert _outcome_facts(blocks.unverified_outcomes()) == _outcome_facts(unverified_outcomes(per_pair))
    assert blocks.islands() == islands(per_pair)


class PerPairEfaPeerUnreachable(EfaPeerUnreachable):
    """The check as it was before blocks: every pair evaluated on its own."""

    def run(self, ctx):
        inv = ctx.inventory
        network = Network.build(inv, Topology(region=ctx.region))
        classes = efa_classes(ctx, network, inv.efa_interfaces())
        graph = evaluate_classes(network, classes, classes, EFA,
                                 skip=lambda a, b: not needs_pair(network.subnets, a, b))
        blocked = blocked_outcomes(graph)
        if not blocked:
            return []
        split = islands(graph)
        return [self._finding(ctx, reason, outcomes, split) for reason, outcomes in by_blocker(blocked)]


def _context(inventory: Inventory, check_id: str) -> CheckContext:
    scope = RunScope(cluster="c", settings=ClusterSettings(), aws=None, inventory=inventory,
                     now=datetime(2026, 1, 1, tzinfo=UTC))
    return CheckContext(scope=scope, check_id=check_id)


@pytest.mark.parametrize("seed", range(150))
def test_efa_peer_unreachable_findings_are_unchanged_by_blocks(seed):
    inventory = random_world(random.Random(1000 + seed))
    expected = PerPairEfaPeerUnreachable().run(_context(inventory, EfaPeerUnreachable.id))
    assert EfaPeerUnreachable().run(_context(inventory, EfaPeerUnreachable.id)) == expected


def test_random_worlds_hold_every_verdict():
    """The worlds above are not all healthy or all broken: blocked, reachable and unverified pairs all occur, and
    the check finds something in most of them."""
    seen, with_findings = set(), 0
    for seed in range(150):
        inventory = random_world(random.Random(seed))
        network = Network.build(inventory, Topology(region="us-west-2"))
        classes = interface_classes(network, inventory.efa_interfaces(), by_public_ip=False)
        blocks = evaluate_efa_classes(network, classes, EFA)
        seen |= {blocks.reachable(a, b) for a, b in blocks.pairs()}
        with_findings += bool(EfaPeerUnreachable().run(_context(random_world(random.Random(1000 + seed)),
                                                                 EfaPeerUnreachable.id)))
    assert seen == {True, False, None}
    assert with_findings > 50
