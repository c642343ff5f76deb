"""EFA between interfaces: which pairs EFA can join at all, and which security-group rules admit a pair.

The one model efa-subnet-spread, efa-peer-unreachable, efa-sg-self-reference and ``why-not --protocol efa``
share, so they never contradict each other:

* **Where EFA goes.** The EC2 EFA guide's limitations (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html):
  "EFA traffic can't cross Availability Zones or VPCs." Interfaces in several subnets of one zone and VPC
  are fine; the zone is compared by its id (DescribeSubnets' AvailabilityZoneId), which names the same zone
  in every account, else by its name. A Local Zone is a zone of its own, so it is never one with its parent.
* **What admits it.** The EFA guide (create-efa.html): "the EFA must be a member of a security group that
  allows all inbound and outbound traffic to and from the security group itself". Between groups, what
  admits a pair is an all-traffic outbound rule on the sender's groups referencing a group of the receiver
  and an all-traffic inbound rule on the receiver's referencing a group of the sender (AWS PCS's EFA group:
  ``--protocol -1 --source-group``). EFA's addresses are not IP addresses, so CIDR rules, the default
  0.0.0.0/0 egress among them, and TCP- or port-limited rules admit none of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fmdoctor.engine.inventory import SecurityGroup, SgRule, Subnet
from fmdoctor.net.security_groups import all_traffic_group_rule

if TYPE_CHECKING:  # classes imports the path evaluation, whose security-group hop imports this module
    from fmdoctor.net.classes import InterfaceClass

SAME = "same"
CROSS_VPC = "vpc"
CROSS_ZONE = "availability-zone"
UNKNOWN = "unknown"


def boundary(subnets: dict[str, Subnet], a: str | None, b: str | None) -> str:
    """What separates two subnets for EFA: nothing (SAME), a VPC, an Availability Zone, or UNKNOWN when a subnet
    was not described."""
    if a == b and a:
        return SAME
    first, second = subnets.get(a or ""), subnets.get(b or "")
    if first is None or second is None or not first.zone or not second.zone:
        return UNKNOWN
    if first.vpc_id != second.vpc_id:
        return CROSS_VPC
    if first.zone != second.zone:
        return CROSS_ZONE
    return SAME


def zone_label(subnets: dict[str, Subnet], subnet_id: str | None) -> str:
    subnet = subnets.get(subnet_id or "")
    if subnet is None:
        return "unknown zone"
    if subnet.availability_zone_id and subnet.availability_zone:
        return f"{subnet.availability_zone} ({subnet.availability_zone_id})"
    return subnet.zone or "unknown zone"


def efa_rule(groups: Iterable[SecurityGroup], egress: bool, peer_group_ids: Iterable[str]) -> SgRule | None:
    """The all-traffic rule of ``groups`` referencing a group of the peer, in that direction (None: none)."""
    return all_traffic_group_rule(groups, egress, peer_group_ids)


def fix_groups(owner: Sequence[str], peer: Sequence[str]) -> tuple[str, str]:
    """(the group to add a rule to, the group the rule references): a group both ends share when there is one
    (its self rule then covers every member), else the owner's first group and the peer's first."""
    shared = [g for g in owner if g in peer]
    if shared:
        return shared[0], shared[0]
    return (owner[0] if owner else ""), (peer[0] if peer else "")


def fix_action(owner: Sequence[str], peer: Sequence[str], egress: bool) -> dict[str, str]:
    target, peer_group = fix_groups(owner, peer)
    return {"action": f"authorize-security-group-{'egress' if egress else 'ingress'}", "group_id": target,
            "ip_protocol": "-1", "peer_group_id": peer_group}


@dataclass(frozen=True)
class EfaPair:
    """An ordered pair of EFA interface classes that EFA can join, and the rules that admit it (None: missing)."""

    source: InterfaceClass
    destination: InterfaceClass
    egress: SgRule | None
    ingress: SgRule | None

    @property
    def admitted(self) -> bool:
        return self.egress is not None and self.ingress is not None


def needs_pair(subnets: dict[str, Subnet], a: InterfaceClass, b: InterfaceClass) -> bool:
    """Whether EFA between the two classes is expected to work: same zone and VPC, and two different nodes."""
    if boundary(subnets, a.key[0], b.key[0]) != SAME:
        return False
    return a.key != b.key or len(a.instance_ids) >= 2


def efa_pairs(groups: dict[str, SecurityGroup], subnets: dict[str, Subnet], classes: Sequence[InterfaceClass]
              ) -> list[EfaPair]:
    """Every ordered pair of classes EFA should join, judged by their groups' rules (classes whose groups were
    not all fetched are left out: the caller reports them)."""
    pairs = []
    for a in classes:
        for b in classes:
            if not needs_pair(subnets, a, b):
                continue
            source_groups = [groups[g] for g in a.key[1] if g in groups]
            destination_groups = [groups[g] for g in b.key[1] if g in groups]
            pairs.append(EfaPair(a, b, efa_rule(source_groups, True, b.key[1]),
                                 efa_rule(destination_groups, False, a.key[1])))
    return pairs
