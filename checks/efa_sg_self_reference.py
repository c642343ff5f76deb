from __future__ import annotations

from dataclasses import dataclass, field

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE, SECURITY_GROUP
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net.efa import EfaPair, efa_pairs, fix_action
from fmdoctor.net.network import Network
from fmdoctor.net.topology import Topology

from ._common import id_list, plural, sample
from ._net import efa_classes

DIRECTIONS = ("ingress", "egress")


@dataclass
class _Missing:
    """What one security group lacks for EFA: rules in a direction, towards which peer groups."""

    directions: set[str] = field(default_factory=set)
    peer_groups: set[str] = field(default_factory=set)
    fix: dict[str, dict[str, str]] = field(default_factory=dict)
    interface_groups: set[tuple[str, ...]] = field(default_factory=set)
    instances: set[str] = field(default_factory=set)
    interfaces: set[str] = field(default_factory=set)


class EfaSgSelfReference(Check):
    """For every pair of EFA interfaces EFA can join (one Availability Zone and VPC), the sender's security groups
    allow all traffic out to, and the receiver's all traffic in from, a group the other interface is in: a group
    referencing itself (the usual EFA group) or node groups' groups referencing each other.

    The EC2 EFA guide (docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-efa.html): "the EFA must be a member
    of a security group that allows all inbound and outbound traffic to and from the security group itself".
    EFA's OS-bypass (SRD) traffic is admitted only by all-traffic rules referencing a group, in both directions: a
    TCP- or port-limited rule, a one-way rule or a CIDR rule (the default 0.0.0.0/0 egress included) leaves NCCL
    hanging or the HyperPod EFA health check failing. Each pair of interface classes is judged by the rules that
    admit that peer, with the model efa-peer-unreachable uses (fmdoctor.net.efa), so the two never disagree.
    """

    id = "efa-sg-self-reference"
    family = "efa"
    concerns = frozenset({NODE, SECURITY_GROUP})
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules",
                   "ec2:DescribeSubnets")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        efa = inv.efa_interfaces()
        if not efa:
            raise NotApplicable("the cluster has no EFA interfaces")
        network = Network.build(inv, Topology(region=ctx.region))
        classes = efa_classes(ctx, network, efa)
        missing: dict[str, _Missing] = {}
        for pair in efa_pairs(network.security_groups, network.subnets, classes):
            if pair.egress is None:
                self._note(missing, pair, egress=True)
            if pair.ingress is None:
                self._note(missing, pair, egress=False)
        shared = sorted(set.intersection(*(set(e.security_group_ids) for e in efa)))
        return [self._finding(ctx, group, gap, shared) for group, gap in sorted(missing.items())]

    @staticmethod
    def _note(missing: dict[str, _Missing], pair: EfaPair, egress: bool) -> None:
        owner, peer = (pair.source, pair.destination) if egress else (pair.destination, pair.source)
        action = fix_action(owner.key[1], peer.key[1], egress)
        gap = missing.setdefault(action["group_id"], _Missing())
        gap.directions.add("egress" if egress else "ingress")
        gap.peer_groups.add(action["peer_group_id"])
        gap.fix[f"{action['action']}:{action['peer_group_id']}"] = action
        gap.interface_groups.add(owner.key[1])
        gap.instances.update(owner.instance_ids)
        gap.interfaces.update(m.id for m in owner.members)

    def _finding(self, ctx: CheckContext, group: str, gap: _Missing, shared: list[str]) -> Finding:
        inv = ctx.inventory
        directions = [d for d in DIRECTIONS if d in gap.directions]
        peers = sorted(gap.peer_groups)
        peer_words = ", ".join(peers)
        direction_text = " and ".join(
            {"ingress": f"inbound from {peer_words}", "egress": f"outbound to {peer_words}"}[d] for d in directions)
        instances = sorted(gap.instances, key=inv.label)
        groups = inv.security_groups[group]
        considered = [r.describe() for r in groups.rules if ("egress" if r.egress else "ingress") in gap.directions]
        reference = "self-referencing" if peers == [group] else "referencing the peers' group"
        return self.finding(
            resource=group,
            summary=(
                f"Security group {group} does not allow all traffic {direction_text}, so EFA traffic between "
                f"{plural(len(instances), 'node')} ({id_list([inv.label(i) for i in instances])}) and their peers is "
                f"blocked; add an all-traffic rule {direction_text} ({reference})."
            ),
            evidence={
                "missing_directions": directions,
                "rules_considered": considered[:20],
                "required_rule": "protocol -1 (all traffic), all ports, peer = a security group the other EFA "
                                 "interface is in",
                "security_group": group,
                "security_group_name": groups.name,
                "peer_security_groups": peers,
                "interface_security_groups": sorted({g for key in gap.interface_groups for g in key}),
                "groups_shared_by_all_efa_interfaces": shared,
                "instance_count": len(instances),
                "instances": sample(instances),
                "efa_interfaces": len(gap.interfaces),
                "efa_interface_sample": sample(sorted(gap.interfaces)),
                "fix": sorted(gap.fix.values(), key=lambda a: (a["action"].endswith("egress"), a["peer_group_id"])),
            },
        )
