"""The security-group hop: the groups of one end on a flow to or from the other end.

Groups are allow-lists and stateful, so only the initiating direction is evaluated; the evidence names
the missing services and peers, and the fix hint is the rule to add (a group reference for interfaces,
S3's prefix list, or the CIDRs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fmdoctor.engine.inventory import SecurityGroup
from fmdoctor.net.efa import efa_rule, fix_action
from fmdoctor.net.hops import FIX_CIDRS_MAX, Trace, fix_cidrs
from fmdoctor.net.model import SG_EGRESS, SG_INGRESS, Endpoint
from fmdoctor.net.security_groups import Peer, evaluate_groups, group_for_fix
from fmdoctor.net.space import FlowSet, Range, cidrs_of, describe_services, rule_services, split_services


def security_group_hop(trace: Trace, owner: Endpoint, egress: bool, peer: Endpoint) -> None:
    """The groups of ``owner`` on a flow to/from ``peer``; stateful, so only the initiating direction."""
    component = "sg-egress" if egress else "sg-ingress"
    code = SG_EGRESS if egress else SG_INGRESS
    groups, unfetched = trace.network.groups(owner.group_ids)
    if unfetched:
        trace.unverified(component, ",".join(unfetched), f"rules of {', '.join(unfetched)} were not fetched")
        return
    if not groups:
        trace.block(code, component, owner.resource, f"{owner.label} has no security group",
                    "attach a security group that admits the traffic")
    way = "outbound to" if egress else "inbound from"
    if trace.flow.efa:
        _efa_groups(trace, component, code, groups, owner, egress, peer)
        return
    services = trace.flow.services()
    verdict = evaluate_groups(groups, egress, FlowSet.of(peer.addresses, services), _peer(peer),
                              trace.network.prefix_ranges)
    if verdict.allowed:
        rules = "; ".join(r.describe() for r in verdict.admitting)
        trace.hop(component, verdict.admitting[0].group_id, f"{trace.flow.describe()} {way} {peer.label}",
                  rule=rules)
        return
    missing = describe_services(verdict.remaining.services())
    trace.note_partial(peer, verdict.remaining.addresses())
    target = group_for_fix(groups, egress, verdict.remaining.services())
    fix = _sg_fix(target.id, egress, verdict.remaining.services(), verdict.remaining.addresses(), peer)
    peer_words = _peer_words(trace, peer, fix)
    towards = "to" if egress else "from"
    others = _peers_for(groups, egress, verdict.remaining.services())
    verb = "admit" if len(groups) > 1 else "admits"
    summary = (f"{_names(groups)} {verb} {missing} only {towards} {', '.join(others)}, not {towards} {peer_words}"
               if others else f"{_names(groups)} {verb} no {missing} {way} {peer_words}")
    trace.block(
        code, component, target.id, summary,
        f"add an {'outbound' if egress else 'inbound'} rule to {target.id} ({target.name}) for {missing} "
        f"{towards} {peer_words}",
        rule=f"missing: {'egress' if egress else 'ingress'} {missing} {towards} {peer_words}",
        fix=fix,
        security_groups=list(owner.group_ids),
        security_group_name=target.name,
        missing=missing,
        missing_addresses=cidrs_of(verdict.remaining.addresses(), FIX_CIDRS_MAX),
        rules_considered=_considered(groups, egress),
        unknown_prefix_lists=list(verdict.unknown_prefix_lists),
    )


def _efa_groups(trace: Trace, component: str, code: str, groups: list[SecurityGroup], owner: Endpoint, egress: bool,
                peer: Endpoint) -> None:
    way = "outbound to" if egress else "inbound from"
    rule = efa_rule(groups, egress, peer.group_ids)
    if rule is not None:
        trace.hop(component, rule.group_id, f"EFA traffic {way} {peer.label}", rule=rule.describe())
        return
    fix = fix_action(owner.group_ids, peer.group_ids, egress)
    target, peer_group = fix["group_id"], fix["peer_group_id"]
    verb = "have" if len(groups) > 1 else "has"
    towards = "to" if egress else "from"
    trace.block(
        code, component, target,
        f"{_names(groups)} {verb} no all-traffic {'outbound' if egress else 'inbound'} rule referencing "
        f"{_group_words(trace, peer.group_ids)}, which EFA needs",
        f"add an all-traffic {'outbound' if egress else 'inbound'} rule to {target} referencing {peer_group}",
        rule=f"missing: {'egress' if egress else 'ingress'} all traffic {towards} {peer_group}",
        fix=[fix],
        security_groups=list(owner.group_ids), peer_security_groups=list(peer.group_ids),
        security_group_name=trace.network.security_groups[target].name if target in
        trace.network.security_groups else "",
        required_rule="protocol -1 (all traffic), peer = a security group the other interface is in",
        rules_considered=_considered(groups, egress),
    )


def _group_words(trace: Trace, group_ids: Sequence[str]) -> str:
    named = [f"{g} ({trace.network.security_groups[g].name})" if g in trace.network.security_groups else g
             for g in group_ids]
    return ", ".join(named) or "no group"


def _peer_words(trace: Trace, peer: Endpoint, fix: Sequence[dict[str, Any]]) -> str:
    """The peer as a rule would name it: its groups, S3's prefix list, or its CIDRs."""
    if peer.internal and peer.group_ids:
        return _group_words(trace, peer.group_ids[:1]) if len(peer.group_ids) == 1 else \
            f"{peer.label}'s groups {_group_words(trace, peer.group_ids)}"
    cidrs = [f["cidr"] for f in fix if f.get("cidr")]
    if peer.prefix_list_ids:
        return f"{peer.label} ({', '.join(sorted(peer.prefix_list_ids))})"
    return ", ".join(cidrs) if cidrs and peer.kind == "cidr" else peer.label


def _peer(endpoint: Endpoint) -> Peer:
    return Peer(group_ids=frozenset(endpoint.group_ids), prefix_list_ids=endpoint.prefix_list_ids,
                ranges=endpoint.addresses)


def _names(groups: Sequence[Any]) -> str:
    return "security group" + ("s " if len(groups) > 1 else " ") + ", ".join(f"{g.id} ({g.name})" for g in groups)


def _peers_for(groups: Sequence[SecurityGroup], egress: bool, services: Sequence[Range]) -> list[str]:
    """Peers that existing rules admit for (part of) these services: 'admits tcp/22 only from 10.0.0.0/16'."""
    wanted = FlowSet.of([(0, 2**32 - 1)], services)
    peers = []
    for group in groups:
        for rule in group.egress() if egress else group.ingress():
            covered = FlowSet.of([(0, 2**32 - 1)], rule_services(rule.protocol, rule.from_port, rule.to_port))
            if rule.protocol != "-1" and not wanted.intersect(covered.parts).empty:
                peers.append(rule.peer)
    return list(dict.fromkeys(peers))


def _considered(groups: Sequence[Any], egress: bool) -> list[str]:
    return [r.describe() for g in groups for r in (g.egress() if egress else g.ingress())][:20]


def _sg_fix(group_id: str, egress: bool, services: Sequence[Range], addresses: Sequence[Range],
            peer: Endpoint) -> list[dict[str, Any]]:
    """authorize-security-group-* hints: a group reference for interfaces, a prefix list for S3, else CIDRs."""
    if peer.internal and peer.group_ids:
        peers: list[dict[str, str]] = [{"peer_group_id": peer.group_ids[0]}]
    elif peer.prefix_list_ids:
        peers = [{"prefix_list_id": sorted(peer.prefix_list_ids)[0]}]
    else:
        peers = [{"cidr": c} for c in fix_cidrs(addresses, peer)]
    actions: list[dict[str, Any]] = []
    for protocol, low, high in split_services(services):
        ports: dict[str, int] = {}
        if protocol in ("tcp", "udp"):
            ports = {"from_port": int(low or 0), "to_port": int(high if high is not None else 65535)}
        elif protocol in ("icmp", "icmpv6"):
            ports = {"from_port": -1, "to_port": -1}
        for target in peers:
            actions.append({"action": f"authorize-security-group-{'egress' if egress else 'ingress'}",
                            "group_id": group_id, "ip_protocol": protocol, **ports, **target})
    return actions
