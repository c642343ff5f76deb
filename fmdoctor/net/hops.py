"""One evaluation's trace: each component the flow crosses becomes a hop; the first that drops it, the blocker.

The evaluators here (security groups, network ACLs, route lookup) record their hop and, when they
block, the explanation code, the rule that decided, the evidence and the fix hint (an action dict of
:data:`fmdoctor.remediation.actions.ACTIONS`, applied by ``fmdoctor fix``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from fmdoctor.net import efa, replies
from fmdoctor.net.model import (
    BLACKHOLE,
    BLOCK,
    EFA_CROSS_SUBNET,
    NACL_DENY,
    NACL_REPLY_PORTS,
    NO_INTERNET_GATEWAY,
    NO_ROUTE,
    PASS,
    UNVERIFIED,
    Blocked,
    Caveat,
    ClientPorts,
    Endpoint,
    Flow,
    Hop,
)
from fmdoctor.net.nacl import NaclVerdict, evaluate_nacl, nacl_fix
from fmdoctor.net.network import Network
from fmdoctor.net.route_fix import attached_igws, describe, missing_route_fix, replacement_fix
from fmdoctor.net.routing import RouteChoice, dead_target, detached_igw, exits, lookup, table_for
from fmdoctor.net.space import FlowSet, Range, cidrs_of, describe_services, merge, service_ranges
from fmdoctor.net.topology import NetworkAcl

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
        self.caveats: list[Caveat] = []
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
              **evidence: Any) -> NoReturn:
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

    def reply_clients(self, at_nat: bool = False) -> tuple[ClientPorts, ...]:
        """Whose ports a reply goes back to: the flow's own clients (Lustre), a NAT gateway's for the leg
        beyond it, the source instances' OS, or every common client when the source is outside the VPC."""
        if self.flow.clients:
            return self.flow.clients
        if at_nat:
            return (replies.NAT_GATEWAY,)
        source = self.source
        if source is None or not source.internal:
            return replies.COMMON_CLIENTS
        platforms = {getattr(self.network.instances.get(i), "platform", None) for i in source.instance_ids}
        if not source.instance_ids or None in platforms:  # not an instance (an appliance, an endpoint): unknown OS
            return replies.COMMON_CLIENTS
        kinds = [replies.WINDOWS] if "windows" in platforms else []
        return tuple(kinds + ([replies.LINUX] if platforms - {"windows"} else []))

    def reply_nacl(self, subnet_id: str, vpc_id: str | None, egress: bool, peer: Endpoint,
                   clients: tuple[ClientPorts, ...]) -> None:
        """The reply crossing a subnet's ACL, judged per kind of client (fmdoctor.net.replies)."""
        if not self.flow.has_ports:
            self.nacl(subnet_id, vpc_id, egress, peer, self.flow.services(), "return")
            return
        component = "nacl-out" if egress else "nacl-in"
        acl = self.network.topology.nacl_for(subnet_id)
        if acl is None:
            self.unverified(component, subnet_id, f"the network ACL of {subnet_id} is not known", "return")
            return
        judged = replies.judge(acl, egress, peer.addresses, self.flow.protocol, clients)
        way = "to" if egress else "from"
        proto = self.flow.protocol
        if judged.blocked_addresses:
            self.note_partial(peer, judged.blocked_addresses)
            self._reply_block(acl, subnet_id, egress, peer, clients, judged)
        wanted = ", ".join(c.name for c in clients)
        if not judged.failing:
            self.hop(component, acl.id, f"{subnet_id} {'out' if egress else 'in'}: replies {way} {peer.label} "
                     f"reach {wanted}", direction="return", rule=judged.verdict.deciding_rule())
            return
        failing = "; ".join(f"{c.name}: {proto} {replies.describe_ports(p)} dropped" for c, p in judged.failing)
        reached = ", ".join(c.name for c in judged.admitted) or "none of them on every port"
        detail = (f"{subnet_id} {'out' if egress else 'in'}: replies {way} {peer.label} reach {reached}; {failing}")
        self.hop(component, acl.id, detail, direction="return", rule=judged.verdict.deciding_rule())
        fix_verdict = evaluate_nacl(acl, egress, FlowSet.of(peer.addresses, service_ranges(
            proto, [replies.fix_range(clients)])))
        cidrs = self._rule_cidrs(peer, fix_verdict)
        self.caveats.append(Caveat(
            NACL_REPLY_PORTS, component, acl.id,
            f"network ACL {acl.id} of {subnet_id} admits replies {way} {peer.label} only on some ports: {failing}",
            f"open {proto} {replies.describe_ports([replies.fix_range(clients)])} {way} {', '.join(cidrs)} for "
            f"replies in {acl.id}, as AWS recommends",
            rule=judged.verdict.deciding_rule(),
            fix=tuple(nacl_fix(fix_verdict, cidrs)) if not fix_verdict.allowed else (),
            evidence={"network_acl": acl.id, "subnet": subnet_id, "egress": egress,
                      "clients_failing": [c.name for c, _ in judged.failing],
                      "clients_reached": [c.name for c in judged.admitted],
                      "ports_dropped": replies.describe_ports(judged.dropped_ports),
                      "rules": [e.describe() for e in acl.ordered(egress)][:20]},
        ))

    def _reply_block(self, acl: NetworkAcl, subnet_id: str, egress: bool, peer: Endpoint,
                     clients: tuple[ClientPorts, ...], judged: replies.ReplyJudgement) -> None:
        proto = self.flow.protocol
        way = "to" if egress else "from"
        spans = replies.describe_ports([c.ports for c in clients])
        fix_verdict = evaluate_nacl(acl, egress, FlowSet.of(judged.blocked_addresses, service_ranges(
            proto, [replies.fix_range(clients)])))
        cidrs = self._rule_cidrs(peer, fix_verdict)
        self.block(
            NACL_DENY, "nacl-out" if egress else "nacl-in", acl.id,
            f"network ACL {acl.id} of {subnet_id} drops every reply {way} {peer.label}: no {proto} port any of "
            f"{', '.join(c.name for c in clients)} replies on ({spans}) is admitted ({judged.verdict.deciding_rule()})",
            f"add an allow rule for {proto} {replies.describe_ports([replies.fix_range(clients)])} {way} "
            f"{', '.join(cidrs)} to {acl.id} numbered below "
            f"{fix_verdict.deciding.rule_number if fix_verdict.deciding else 'the final * rule'}",
            direction="return", rule=judged.verdict.deciding_rule(), fix=nacl_fix(fix_verdict, cidrs),
            network_acl=acl.id, subnet=subnet_id, egress=egress,
            denied=describe_services(judged.verdict.denied.services()),
            denied_addresses=cidrs_of(judged.blocked_addresses, FIX_CIDRS_MAX),
            clients=[c.name for c in clients],
            rules=[e.describe() for e in acl.ordered(egress)][:20],
        )

    def _rule_cidrs(self, peer: Endpoint, verdict: NaclVerdict) -> list[str]:
        cidr = self.network.subnet_cidr(peer.subnet_id) if peer.internal else None
        return [cidr] if cidr else fix_cidrs(verdict.denied.addresses() or peer.addresses, peer)

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

    def efa_zones(self, src: Endpoint, dst: Endpoint) -> None:
        """EFA joins interfaces in one Availability Zone and VPC, whatever their subnets (the EFA guide's
        limitations: "EFA traffic can't cross Availability Zones or VPCs")."""
        subnets = self.network.subnets
        verdict = efa.boundary(subnets, src.subnet_id, dst.subnet_id)
        where = (f"{src.subnet_id} ({efa.zone_label(subnets, src.subnet_id)}) and {dst.subnet_id} "
                 f"({efa.zone_label(subnets, dst.subnet_id)})")
        if verdict == efa.SAME:
            same = "one subnet" if src.subnet_id == dst.subnet_id else f"{where}: one Availability Zone and VPC"
            self.hop("efa-zone", dst.subnet_id or "?", f"EFA between {same}")
        elif verdict == efa.UNKNOWN:
            self.unverified("efa-zone", dst.subnet_id or "?", f"the Availability Zone of {where} is not known")
        else:
            boundary = "VPCs" if verdict == efa.CROSS_VPC else "Availability Zones"
            self.block(EFA_CROSS_SUBNET, "subnet", dst.subnet_id or "?",
                       f"{src.label} is in {src.subnet_id} and {dst.label} in {dst.subnet_id}, in different "
                       f"{boundary} ({where}): EFA traffic can't cross Availability Zones or VPCs",
                       f"run both in one Availability Zone of one VPC (any subnet there: {src.subnet_id}'s zone)",
                       source_subnet=src.subnet_id, destination_subnet=dst.subnet_id, crosses=verdict,
                       source_zone=efa.zone_label(subnets, src.subnet_id),
                       destination_zone=efa.zone_label(subnets, dst.subnet_id))


def fix_cidrs(addresses: Sequence[Range], peer: Endpoint) -> list[str]:
    """CIDRs a fix should name: the missing ones, or 0.0.0.0/0 for the internet or a set too large to list."""
    cidrs = cidrs_of(addresses, FIX_CIDRS_MAX)
    if peer.kind == "internet" or any(c.startswith("...") for c in cidrs):
        return ["0.0.0.0/0"]
    return cidrs


