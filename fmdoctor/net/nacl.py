"""Network ACL semantics: stateless, ordered by rule number, first match decides, implicit deny at the end.

Evaluated on the flow set (:mod:`fmdoctor.net.space`), so a deny that catches part of a CIDR or port
range is found even when an allow rule covers the rest, and a lower-numbered deny shadows a later allow.
ACLs apply where traffic crosses a subnet boundary, in each direction separately: replies need their
own rules, to and from the client's ephemeral ports (:mod:`fmdoctor.net.replies` says whose).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmdoctor.net.space import Box, FlowSet, boxes, cidr_range, rule_services, split_services
from fmdoctor.net.topology import IMPLICIT_DENY_RULE, NaclEntry, NetworkAcl

MAX_RULE_NUMBER = 32766


@dataclass(frozen=True)
class NaclVerdict:
    acl: NetworkAcl
    egress: bool
    allowed: bool
    deciding: NaclEntry | None = None  # the deny that caught the flow; None and not allowed: implicit deny
    denied: FlowSet = FlowSet()
    allowing: tuple[NaclEntry, ...] = ()

    def deciding_rule(self) -> str:
        if self.allowed:
            return ", ".join(e.describe() for e in self.allowing)
        if self.deciding is None:
            return f"rule * {'outbound' if self.egress else 'inbound'} deny all 0.0.0.0/0 (no rule matched)"
        return self.deciding.describe()


def entry_boxes(entry: NaclEntry) -> list[Box]:
    return boxes([cidr_range(entry.cidr or "0.0.0.0/0")], rule_services(entry.protocol, entry.from_port, entry.to_port))


def evaluate_nacl(acl: NetworkAcl, egress: bool, flow: FlowSet) -> NaclVerdict:
    """Walk the rules in number order; the flow is allowed only if allow rules decide all of it."""
    undecided = flow
    allowing: list[NaclEntry] = []
    for entry in acl.ordered(egress):
        cut = entry_boxes(entry)
        hit = undecided.intersect(cut)
        if hit.empty:
            continue
        if not entry.allow:
            return NaclVerdict(acl, egress, False, entry, hit, tuple(allowing))
        allowing.append(entry)
        undecided = undecided.minus(cut)
        if undecided.empty:
            return NaclVerdict(acl, egress, True, allowing=tuple(allowing))
    if undecided.empty:
        return NaclVerdict(acl, egress, True, allowing=tuple(allowing))
    return NaclVerdict(acl, egress, False, None, undecided, tuple(allowing))


def free_rule_number(acl: NetworkAcl, egress: bool, below: int | None) -> int | None:
    """A free rule number that is evaluated before ``below`` (or after the last rule when ``below`` is None)."""
    used = {e.rule_number for e in acl.entries if e.egress == egress}
    if below is None or below >= IMPLICIT_DENY_RULE:
        highest = max((n for n in used if n < IMPLICIT_DENY_RULE), default=0)
        start = min(MAX_RULE_NUMBER, (highest // 10 + 1) * 10)
        candidates = list(range(start, 0, -1))
    else:
        candidates = list(range(below - 1, 0, -1))
    return next((n for n in candidates if n not in used), None)


def nacl_fix(verdict: NaclVerdict, peer_cidrs: list[str]) -> list[dict[str, Any]]:
    """create-network-acl-entry hints that allow what was denied, numbered before the denying rule.

    Empty when no free rule number comes before the deny (the rules must be renumbered by hand).
    """
    below = verdict.deciding.rule_number if verdict.deciding else None
    number = free_rule_number(verdict.acl, verdict.egress, below)
    if number is None:
        return []
    actions = []
    for protocol, low, high in split_services(verdict.denied.services()):
        for cidr in peer_cidrs:
            actions.append({
                "action": "create-network-acl-entry",
                "network_acl_id": verdict.acl.id,
                "rule_number": number,
                "egress": verdict.egress,
                "protocol": {"tcp": "6", "udp": "17", "icmp": "1"}.get(protocol, protocol),
                "from_port": low if low is not None else -1,
                "to_port": high if high is not None else -1,
                "cidr": cidr,
                "rule_action": "allow",
            })
            number = free_rule_number_after(verdict, number, actions)
            if number is None:
                return actions
    return actions


def free_rule_number_after(verdict: NaclVerdict, taken: int, planned: list[dict[str, Any]]) -> int | None:
    used = {e.rule_number for e in verdict.acl.entries if e.egress == verdict.egress}
    used |= {a["rule_number"] for a in planned}
    return next((n for n in range(taken - 1, 0, -1) if n not in used), None)
