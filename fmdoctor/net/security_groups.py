"""Security-group rule semantics: which rules admit which traffic.

Security groups are allow-lists evaluated per interface; the rules of every group on an interface
add up. A rule names exactly one peer: a CIDR, a prefix list or a referenced group (whose members'
private IPs it admits). Groups are stateful: the reply to an admitted flow is admitted, so only the
initiating direction is evaluated.

Evaluation is exact over sets (:mod:`fmdoctor.net.space`): the flow's (peer address x service) set
minus every admitting rule's rectangle; whatever is left is dropped, and says which ports and
addresses a fix must add.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from fmdoctor.engine.inventory import SecurityGroup, SgRule
from fmdoctor.net.space import Box, FlowSet, Range, address_range, boxes, cidr_range, rule_services, service_ranges

ALL = "-1"

PrefixListRanges = Callable[[str], "tuple[Range, ...] | None"]


@dataclass(frozen=True)
class Peer:
    """The other end of a flow as a security group sees it."""

    ip: str | None = None
    group_ids: frozenset[str] = field(default_factory=frozenset)
    prefix_list_ids: frozenset[str] = field(default_factory=frozenset)  # prefix lists the peer is (within)
    ranges: tuple[Range, ...] = ()  # every address of the peer: an interface's IPs, a class's, a CIDR

    @property
    def addresses(self) -> tuple[Range, ...]:
        if self.ranges:
            return self.ranges
        return (address_range(self.ip),) if self.ip else ()


def _no_lists(_: str) -> tuple[Range, ...] | None:
    return None


def rule_boxes(rule: SgRule, peer: Peer, prefix_lists: PrefixListRanges = _no_lists) -> list[Box]:
    """The part of the peer's (address x service) space a rule admits."""
    services = rule_services(rule.protocol, rule.from_port, rule.to_port)
    if rule.referenced_group_id:
        addresses: Sequence[Range] = peer.addresses if rule.referenced_group_id in peer.group_ids else ()
    elif rule.prefix_list_id:
        if rule.prefix_list_id in peer.prefix_list_ids:
            addresses = peer.addresses
        else:
            addresses = prefix_lists(rule.prefix_list_id) or ()
    elif rule.cidr_ipv4:
        addresses = (cidr_range(rule.cidr_ipv4),)
    else:
        addresses = ()  # IPv6 rules never admit IPv4 flows
    return boxes(addresses, services)


@dataclass(frozen=True)
class SgVerdict:
    """What a set of groups does with a flow in one direction."""

    egress: bool
    remaining: FlowSet  # dropped: no rule admits it
    admitting: tuple[SgRule, ...]  # rules that admitted part of it
    unknown_prefix_lists: tuple[str, ...] = ()  # named by rules, CIDRs not known: the verdict may be too strict

    @property
    def allowed(self) -> bool:
        return self.remaining.empty


def evaluate_groups(
    groups: Iterable[SecurityGroup],
    egress: bool,
    flow: FlowSet,
    peer: Peer,
    prefix_lists: PrefixListRanges = _no_lists,
) -> SgVerdict:
    remaining = flow
    admitting: list[SgRule] = []
    unknown: list[str] = []
    for group in groups:
        for rule in group.egress() if egress else group.ingress():
            if remaining.empty:
                break
            if rule.prefix_list_id and rule.prefix_list_id not in peer.prefix_list_ids \
                    and prefix_lists(rule.prefix_list_id) is None:
                unknown.append(rule.prefix_list_id)
            cut = rule_boxes(rule, peer, prefix_lists)
            if cut and not remaining.intersect(cut).empty:
                admitting.append(rule)
                remaining = remaining.minus(cut)
    return SgVerdict(egress, remaining, tuple(admitting), tuple(sorted(set(unknown))))


def rule_admits(rule: SgRule, protocol: str, port: int | None, peer: Peer) -> bool:
    """Whether one rule admits the whole flow (``port`` None: every port of the protocol)."""
    flow = FlowSet.of(peer.addresses, service_ranges(protocol, [(port, port)] if port is not None else None))
    return not flow.empty and flow.minus(rule_boxes(rule, peer)).empty


def first_admitting_rule(
    groups: Iterable[SecurityGroup], egress: bool, protocol: str, port: int | None, peer: Peer
) -> SgRule | None:
    """The rule that admits the flow in that direction, or ``None`` when no single rule does."""
    for group in groups:
        for rule in group.egress() if egress else group.ingress():
            if rule_admits(rule, protocol, port, peer):
                return rule
    return None


def all_traffic_group_rule(
    groups: Iterable[SecurityGroup], egress: bool, peer_groups: Iterable[str]
) -> SgRule | None:
    """An all-traffic rule referencing one of ``peer_groups``: what EFA's OS-bypass traffic needs.

    AWS's EFA guide requires the group to allow all inbound and outbound traffic from and to itself;
    CIDR rules (the default 0.0.0.0/0 egress included) and TCP/port-limited rules do not admit SRD.
    This is the one definition of "EFA-admitting" used by efa-sg-self-reference and the reachability
    engine's EFA flows alike.
    """
    acceptable = set(peer_groups)
    for group in groups:
        for rule in group.egress() if egress else group.ingress():
            if rule.all_traffic and rule.referenced_group_id in acceptable:
                return rule
    return None


def group_for_fix(groups: Sequence[SecurityGroup], egress: bool, services: Sequence[Range]) -> SecurityGroup:
    """Where a new rule belongs: a group already holding rules for these services in that direction
    (e.g. the one with the too-narrow SSH rule), else a group that is not the VPC's default, else the first."""
    wanted = FlowSet.of([(0, 2**32 - 1)], services)
    for group in groups:
        for rule in group.egress() if egress else group.ingress():
            if rule.protocol != ALL and not wanted.intersect(
                    boxes([(0, 2**32 - 1)], rule_services(rule.protocol, rule.from_port, rule.to_port))).empty:
                return group
    return next((g for g in groups if g.name != "default"), groups[0])
