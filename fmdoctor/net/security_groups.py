"""Security-group rule semantics: which rules admit which traffic.

Security groups are allow-lists evaluated per interface; the rules of every group on an interface
add up. A rule names exactly one peer: a CIDR, a prefix list or a referenced group (whose members'
private IPs it admits).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from fmdoctor.engine.inventory import SecurityGroup, SgRule

ALL = "-1"


@dataclass(frozen=True)
class Peer:
    """The other end of a flow as a security group sees it."""

    ip: str | None = None
    group_ids: frozenset[str] = field(default_factory=frozenset)
    prefix_list_ids: frozenset[str] = field(default_factory=frozenset)  # prefix lists containing ip


def protocol_matches(rule: SgRule, protocol: str) -> bool:
    return rule.protocol in (ALL, protocol)


def port_matches(rule: SgRule, protocol: str, port: int | None) -> bool:
    if rule.protocol == ALL:
        return True
    if protocol == ALL:
        return False  # a protocol-specific rule never admits "all traffic"
    if rule.protocol in {"icmp", "icmpv6"} or port is None:
        return True
    low = -1 if rule.from_port is None else rule.from_port
    high = -1 if rule.to_port is None else rule.to_port
    if (low, high) == (-1, -1):
        return True
    return low <= port <= high


def peer_matches(rule: SgRule, peer: Peer) -> bool:
    if rule.referenced_group_id:
        return rule.referenced_group_id in peer.group_ids
    if rule.prefix_list_id:
        return rule.prefix_list_id in peer.prefix_list_ids
    cidr = rule.cidr_ipv4 or rule.cidr_ipv6
    if cidr and peer.ip:
        try:
            return ipaddress.ip_address(peer.ip) in ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return False
    return False


def rule_admits(rule: SgRule, protocol: str, port: int | None, peer: Peer) -> bool:
    return protocol_matches(rule, protocol) and port_matches(rule, protocol, port) and peer_matches(rule, peer)


def first_admitting_rule(
    groups: Iterable[SecurityGroup], egress: bool, protocol: str, port: int | None, peer: Peer
) -> SgRule | None:
    """The rule that admits the flow in that direction, or ``None`` when the groups drop it."""
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
    """
    acceptable = set(peer_groups)
    for group in groups:
        for rule in group.egress() if egress else group.ingress():
            if rule.all_traffic and rule.referenced_group_id in acceptable:
                return rule
    return None
