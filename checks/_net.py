"""What the network checks share: turning reachability outcomes into evidence and unverified entries."""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.inventory import Instance, Inventory, NetworkInterface
from fmdoctor.net.classes import InterfaceClass, PairOutcome, interface_classes
from fmdoctor.net.model import SG_EGRESS, SG_INGRESS, Blocked, Caveat, ReachabilityResult
from fmdoctor.net.network import Network, primary_interface

from ._common import SAMPLE

MARK = {"pass": "ok", "block": "BLOCKED", "unverified": "unverified"}


@dataclass(frozen=True)
class EfaShortfall:
    """A node with fewer EFA interfaces than it should have: none where efa-not-attached expects one (critical
    there), or fewer than its type's MaximumEfaInterfaces where it uses EFA (efa-missing-interfaces, a warning)."""

    have: int
    expected: int  # DescribeInstanceTypes' NetworkInfo.EfaInfo.MaximumEfaInterfaces
    why: str  # "accelerated", "node-group" (its group's other nodes use EFA) or "uses-efa"

    @property
    def none(self) -> bool:
        return self.have == 0


def groups_using_efa(inventory: Inventory) -> set[str]:
    """Node groups (launch template, ASG, EKS node group, ParallelCluster compute resource) with a node on EFA."""
    return {n.node_group for n in inventory.compute_nodes()
            if n.node_group and any(e.is_efa for e in inventory.interfaces_of(n))}


def efa_shortfall(inventory: Inventory, node: Instance, efa_groups: set[str]) -> EfaShortfall | None:
    """The EFA interfaces ``node`` lacks, by the rules of efa-not-attached and efa-missing-interfaces; None when it
    has them all or is not expected to use EFA. LookupError when DescribeInstanceTypes did not say (the type was
    not returned, gives no MaximumEfaInterfaces for a node that uses EFA, or says no EFA for a node that has EFA
    interfaces): that is not judged, never healthy."""
    info = inventory.instance_types.get(node.instance_type)
    if info is None:
        raise LookupError(f"DescribeInstanceTypes did not return {node.instance_type}")
    have = sum(1 for e in inventory.interfaces_of(node) if e.is_efa)
    if not info.efa_supported:
        if have:  # the type says no EFA, the node has EFA interfaces: a contradiction is not judged
            raise LookupError(f"DescribeInstanceTypes says {node.instance_type} does not support EFA, yet a node "
                              "of it has EFA interfaces")
        return None
    if have == 0:
        if info.accelerated:
            return EfaShortfall(0, info.max_efa_interfaces, "accelerated")
        if node.node_group in efa_groups:
            return EfaShortfall(0, info.max_efa_interfaces, "node-group")
        return None  # an EFA-capable CPU node needs none
    if not info.max_efa_interfaces:
        raise LookupError(f"DescribeInstanceTypes gives no EfaInfo.MaximumEfaInterfaces for {node.instance_type}")
    return EfaShortfall(have, info.max_efa_interfaces, "uses-efa") if have < info.max_efa_interfaces else None


def efa_classes(ctx: CheckContext, network: Network, efa: Sequence[NetworkInterface]) -> list[InterfaceClass]:
    """EFA interfaces by (subnet, security groups), leaving out (and reporting as not verified) those whose groups
    or subnet DescribeSecurityGroups/DescribeSubnets did not return: both EFA group checks judge the same classes."""
    classes = interface_classes(network, efa, by_public_ip=False, what="EFA interface")
    missing = sorted({g for c in classes for g in c.key[1] if g not in network.security_groups})
    if missing:
        ctx.unverified(f"EFA pairs whose interfaces use {', '.join(missing)}", "GroupNotFound",
                       "DescribeSecurityGroups did not return these groups")
    unplaced = sorted({c.key[0] for c in classes if not getattr(network.subnets.get(c.key[0]), "zone", "")})
    if unplaced:
        ctx.unverified(f"EFA pairs with interfaces in {', '.join(unplaced)}", "SubnetNotFound",
                       "DescribeSubnets did not say which Availability Zone these subnets are in")
    return [c for c in classes if not set(c.key[1]) & set(missing) and c.key[0] not in unplaced]


def primary_interfaces(inventory: Inventory, instances: Iterable[Instance]) -> list[NetworkInterface]:
    found = []
    for instance in instances:
        eni = primary_interface(inventory.interfaces_of(instance))
        if eni is not None:
            found.append(eni)
    return found


def hop_trail(result: ReachabilityResult, limit: int = 16) -> list[str]:
    """The path as short lines ('ok sg-egress sg-1: ...'), most of it, for evidence people read."""
    lines = [f"{MARK.get(h.verdict, h.verdict)} {h.component} {h.resource}"
             + (" (reply)" if h.direction == "return" else "") + f": {h.detail}" for h in result.hops]
    return lines if len(lines) <= limit else lines[: limit - 1] + [f"... {len(lines) - limit + 1} more hops"]


def by_blocker(outcomes: Iterable[PairOutcome]) -> list[tuple[Blocked, list[PairOutcome]]]:
    """Outcomes grouped by what blocks them (code, component, resource, direction), biggest group first."""
    groups: dict[tuple[str, str, str, str], list[PairOutcome]] = {}
    for outcome in outcomes:
        blocked = outcome.blocked_by
        assert blocked is not None
        key = (blocked.code, blocked.component, blocked.resource, str(blocked.evidence.get("direction")))
        groups.setdefault(key, []).append(outcome)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0].blocked_by.resource))  # type: ignore
    return [(g[0].blocked_by, g) for g in ordered]  # type: ignore[misc]


def merged_fix(blockers: Iterable[Blocked]) -> list[dict[str, Any]]:
    """Every fix action once, in order (several class pairs often need the very same rule)."""
    seen: set[str] = set()
    read: dict[int, Blocked] = {}  # the same blocker object for many class pairs: its actions once (held, so ids stay)
    actions = []
    for blocked in blockers:
        if id(blocked) in read:
            continue
        read[id(blocked)] = blocked
        for action in blocked.fix:
            key = json.dumps(action, sort_keys=True)
            if key not in seen:
                seen.add(key)
                actions.append(action)
    return actions


def blocker_evidence(blocked: Blocked, result: ReachabilityResult) -> dict[str, Any]:
    """The keys every network finding carries (runbooks rely on them)."""
    return {
        "code": blocked.code,
        "component": blocked.component,
        "blocking_resource": blocked.resource,
        "rule": blocked.rule or "",
        "explanation": blocked.summary,
        "remedy": str(blocked.evidence.get("remedy", "")),
        "direction": str(blocked.evidence.get("direction", "forward")),
        "hops": hop_trail(result),
    }


def caveat_evidence(caveat: Caveat, result: ReachabilityResult) -> dict[str, Any]:
    """The keys a network finding carries (as :func:`blocker_evidence`) for a path that passes with a caveat."""
    return {
        **blocker_evidence(as_blocked(caveat), result),
        "clients_failing": caveat.evidence.get("clients_failing", []),
        "clients_reached": caveat.evidence.get("clients_reached", []),
        "ports_dropped": caveat.evidence.get("ports_dropped", ""),
    }


def as_blocked(caveat: Caveat) -> Blocked:
    """A caveat in the shape :func:`merged_fix` and the fix planner read."""
    return Blocked(caveat.code, caveat.component, caveat.resource, caveat.rule, list(caveat.fix),
                   {"summary": caveat.summary, "remedy": caveat.remedy, "direction": caveat.direction})


def by_caveat(outcomes: Iterable[PairOutcome]) -> list[tuple[Caveat, list[PairOutcome]]]:
    """Reachable outcomes with a caveat, grouped by it (code, resource, what fails), biggest group first."""
    groups: dict[tuple[str, str, str], list[PairOutcome]] = {}
    first: dict[tuple[str, str, str], Caveat] = {}
    for outcome in outcomes:
        if outcome.result.reachable is not True:
            continue
        for caveat in outcome.result.warnings:
            key = (caveat.code, caveat.resource, caveat.summary.split(": ", 1)[-1])
            groups.setdefault(key, []).append(outcome)
            first.setdefault(key, caveat)
    ordered = sorted(groups, key=lambda k: (-len(groups[k]), k))
    return [(first[k], groups[k]) for k in ordered]


def instances_of(outcomes: Sequence[PairOutcome], side: str) -> list[str]:
    ids = {i for o in outcomes for i in (o.source if side == "source" else o.destination).instance_ids}
    return sorted(ids)


def note_unverified(ctx: CheckContext, what: str, results: Iterable[ReachabilityResult]) -> None:
    """A path nothing blocks but part of which could not be evaluated is reported as unverified, never healthy."""
    for result in results:
        details = "; ".join(f"{h.component} {h.resource}: {h.detail}" for h in result.unverified)
        ctx.unverified(f"{what}: {result.source.label} -> {result.destination.label}", "NotEvaluated", details)


def labels(inventory: Inventory, instance_ids: Sequence[str]) -> list[str]:
    """A sample of node labels in name order ('gpu-node-9' before 'gpu-node-10'), cheap for thousands."""
    return heapq.nsmallest(SAMPLE, (inventory.label(i) for i in instance_ids), key=lambda text: (len(text), text))


def explain(reason: Blocked, outcomes: Sequence[PairOutcome], inventory: Inventory) -> str:
    """'<what blocks>; <what to do>' in one clause each; a group missing the same rule for several peers
    names all of them."""
    remedy = str(reason.evidence.get("remedy", ""))
    if reason.code not in (SG_INGRESS, SG_EGRESS):
        return f"{reason.summary}; {remedy}"
    peers = list(dict.fromkeys(
        a.get("peer_group_id") or a.get("prefix_list_id") or a.get("cidr")
        for o in outcomes if o.blocked_by for a in o.blocked_by.fix))
    if len(peers) < 2:
        return f"{reason.summary}; {remedy}"
    named = ", ".join(f"{p} ({inventory.security_groups[p].name})" if p in inventory.security_groups else str(p)
                      for p in peers)
    egress = reason.code == SG_EGRESS
    group = reason.resource + (f" ({reason.evidence['security_group_name']})"
                               if reason.evidence.get("security_group_name") else "")
    missing = reason.evidence.get("missing") or "all traffic"
    return (f"security group {group} admits no {missing} {'outbound to' if egress else 'inbound from'} {named}; "
            f"add {'outbound' if egress else 'inbound'} rules to {group} for {missing} "
            f"{'to' if egress else 'from'} {named}")
