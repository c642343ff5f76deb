"""One evaluation's trace: each component the flow crosses becomes a hop; the first that drops it, the blocker.

The evaluators here (security groups, network ACLs, route lookup) record their hop and, when they
block, the explanation code, the rule that decided, the evidence and the fix hint (COMMON.md's
action dicts, applied by ``fmdoctor fix``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fmdoctor.net.model import (
    BLACKHOLE,
    BLOCK,
    EFA_CROSS_SUBNET,
    NACL_DENY,
    NO_INTERNET_GATEWAY,
    NO_ROUTE,
    PASS,
    UNVERIFIED,
    Blocked,
    Endpoint,
    Flow,
    Hop,
)
from fmdoctor.net.nacl import evaluate_nacl, nacl_fix
from fmdoctor.net.network import Network
from fmdoctor.net.route_fix import attached_igws, describe, missing_route_fix, replacement_fix
from fmdoctor.net.routing import RouteChoice, dead_target, detached_igw, exits, lookup, table_for
from fmdoctor.net.space import FlowSet, Range, cidrs_of, describe_services, merge

FIX_CIDRS_MAX = 4


class Stop(Exception):
    """Raised by :meth:`Trace.block`: the flow is dropped here, nothing after it matters."""


class Trace:
    def __init__(self, network: Network, flow: Flow, source: Endpoint | None = None,
                 destination: Endpoint | None = None):
        self.network = network
        self.flow = flow
        self.source = source
        self.destination = destination
        self.hops: list[Hop] = []
        self.blocked: Blocked | None = None
        self.partial: tuple[str, tuple[Range, ...]] | None = None
        self.path: str | None = None  # stamped on the hops of one of several ways out

    def note_partial(self, peer: Endpoint, blocked: Sequence[Range]) -> None:
        """Record that only ``blocked`` of the peer's addresses are dropped (before :meth:`block`)."""
        blocked = merge(blocked)
        if not blocked or blocked == merge(peer.addresses):
            return
        side = "source" if peer is self.source else "destination" if peer is self.destination else None
        if side is not None:
            self.partial = (side, blocked)

    def hop(self, component: str, resource: str, detail: str, *, verdict: str = PASS, direction: str = "forward",
            rule: str | None = None) -> None:
        self.hops.append(Hop(component, resource, verdict, detail, direction, rule, self.path))

    def unverified(self, component: str, resource: str, detail: str, direction: str = "forward") -> None:
        self.hop(component, resource, detail, verdict=UNVERIFIED, direction=direction)

    def block(self, code: str, component: str, resource: str, summary: str, remedy: str, *,
              direction: str = "forward", rule: str | None = None, fix: Sequence[dict[str, Any]] = (),
              **evidence: Any) -> None:
        """Record the blocker: what drops the flow (``summary``) and what a person should do (``remedy``)."""
        self.hop(component, resource, summary, verdict=BLOCK, direction=direction, rule=rule)
        self.blocked = Blocked(code, component, resource, rule, list(fix),
                               {"summary": summary, "remedy": remedy, "direction": direction, **evidence})
        raise Stop

    # -- network ACLs ----------------------------------------------------------------------------------

    def nacl(self, subnet_id: str, vpc_id: str | None, egress: bool, peer: Endpoint, services: Sequence[Range],
             direction: str = "forward", peer_ranges: Sequence[Range] | None = None) -> None:
        component = "nacl-out" if egress else "nacl-in"
        acl = self.network.topology.nacl_for(subnet_id)
        if acl is None:
            self.unverified(component, subnet_id, f"the network ACL of {subnet_id} is not known", direction)
            return
        ranges = tuple(peer_ranges if peer_ranges is not None else peer.addresses)
        verdict = evaluate_nacl(acl, egress, FlowSet.of(ranges, services))
        way = "to" if egress else "from"
        what = describe_services(services)
        if verdict.allowed:
            self.hop(component, acl.id, f"{subnet_id} {'out' if egress else 'in'}: {what} {way} {peer.label}",
                     direction=direction, rule=verdict.deciding_rule())
            return
        self.note_partial(peer, verdict.denied.addresses())
        cidr = self.network.subnet_cidr(peer.subnet_id) if peer.internal else None
        rule_cidrs = [cidr] if cidr else fix_cidrs(verdict.denied.addresses(), peer)
        reply = " (the reply)" if direction == "return" else ""
        self.block(
            NACL_DENY, component, acl.id,
            f"network ACL {acl.id} of {subnet_id} drops {describe_services(verdict.denied.services())}{reply} "
            f"{way} {peer.label} ({verdict.deciding_rule()})",
            f"add an allow rule for {describe_services(verdict.denied.services())} {way} {', '.join(rule_cidrs)} to "
            f"{acl.id} numbered below {verdict.deciding.rule_number if verdict.deciding else 'the final * rule'}",
            direction=direction, rule=verdict.deciding_rule(), fix=nacl_fix(verdict, rule_cidrs),
            network_acl=acl.id, subnet=subnet_id, egress=egress,
            denied=describe_services(verdict.denied.services()),
            denied_addresses=cidrs_of(verdict.denied.addresses(), FIX_CIDRS_MAX),
            rules=[e.describe() for e in acl.ordered(egress)][:20],
        )

    def skip_acls_same_subnet(self, subnet_id: str) -> None:
        self.hop("route", subnet_id, "same subnet: delivered directly; network ACLs and route tables do not apply",
                 rule="local")

    # -- routes ------------------------------------------------------------------------------------------

    def routes(self, subnet_id: str, vpc_id: str, destination: Endpoint, ranges: Sequence[Range] | None = None,
               direction: str = "forward", skip_kinds: frozenset[str] = frozenset()) -> list[RouteChoice]:
        topology = self.network.topology
        table, how = table_for(topology, subnet_id, vpc_id)
        if table is None:
            self.unverified("route", subnet_id, f"the route table of {subnet_id} is not known", direction)
            return []
        choices = lookup(topology, table, ranges if ranges is not None else destination.addresses,
                         skip_kinds=skip_kinds)
        sender = self._sender(subnet_id)
        for choice in choices:
            where = destination.part_label(choice.ranges)
            if choice.route is None or dead_target(topology, choice.route, vpc_id):
                self.note_partial(destination, choice.ranges)
            if choice.route is None:
                reply = "replies to " if direction == "return" else ""
                fix = missing_route_fix(topology, table, vpc_id, sender, destination, choice.ranges, direction)
                self.block(
                    NO_ROUTE, "route", table.id,
                    f"route table {table.id} ({how} of {subnet_id}) has no route for {reply}{where}",
                    describe(fix) or f"add a route for {where} to {table.id} (through an internet gateway, NAT "
                    "gateway, endpoint, peering or transit gateway, as intended)",
                    direction=direction, rule=f"missing: route for {where}", route_table=table.id, subnet=subnet_id,
                    destination=where, routes=[r.describe() for r in table.routes], exits=exits(topology, table),
                    fix=fix,
                )
            if detached_igw(topology, choice.route, vpc_id):
                igw = choice.route.target_id
                attached = attached_igws(topology, vpc_id)
                instead = f"point the route at {attached[0]}, which is attached" if attached else \
                    f"attach {igw} to {vpc_id} (or another internet gateway, and point the route at it)"
                fix = replacement_fix(topology, table, vpc_id, choice.route, sender, destination, direction)
                self.block(NO_INTERNET_GATEWAY, "route", table.id,
                           f"{where} is routed by {table.id} to internet gateway {igw}, which is not attached to "
                           f"{vpc_id}", describe(fix) or instead, direction=direction, rule=choice.route.describe(),
                           route_table=table.id, subnet=subnet_id, internet_gateway=igw, vpc=vpc_id,
                           attached_internet_gateways=attached, fix=fix)
            reason = dead_target(topology, choice.route, vpc_id)
            if reason:
                fix = replacement_fix(topology, table, vpc_id, choice.route, sender, destination, direction)
                self.block(BLACKHOLE, "route", table.id, f"{where} is routed by {table.id} into a blackhole: {reason}",
                           describe(fix) or f"replace route {choice.route.describe()} in {table.id} with one to a "
                           "live target", direction=direction, rule=choice.route.describe(), route_table=table.id,
                           subnet=subnet_id, target=choice.route.target_id, reason=reason, fix=fix)
        return choices

    def _sender(self, subnet_id: str) -> Endpoint | None:
        """The interface whose traffic the subnet's table routes (None: a NAT gateway's own subnet)."""
        return next((e for e in (self.source, self.destination)
                     if e is not None and e.internal and e.subnet_id == subnet_id), None)

    def route_hop(self, table_subnet: str, choice: RouteChoice, detail: str, direction: str = "forward",
                  verdict: str = PASS) -> None:
        rule = choice.route.describe() if choice.route else None
        self.hop("route", choice.table_id or table_subnet, detail, verdict=verdict, direction=direction, rule=rule)

    def efa_subnets(self, src: Endpoint, dst: Endpoint) -> None:
        if src.subnet_id != dst.subnet_id:
            self.block(EFA_CROSS_SUBNET, "subnet", dst.subnet_id or "?",
                       f"{src.label} is in {src.subnet_id} and {dst.label} in {dst.subnet_id}: EFA's OS-bypass "
                       "traffic does not cross subnets", f"run both in one subnet ({src.subnet_id})",
                       source_subnet=src.subnet_id, destination_subnet=dst.subnet_id)


def fix_cidrs(addresses: Sequence[Range], peer: Endpoint) -> list[str]:
    """CIDRs a fix should name: the missing ones, or 0.0.0.0/0 for the internet or a set too large to list."""
    cidrs = cidrs_of(addresses, FIX_CIDRS_MAX)
    if peer.kind == "internet" or any(c.startswith("...") for c in cidrs):
        return ["0.0.0.0/0"]
    return cidrs


