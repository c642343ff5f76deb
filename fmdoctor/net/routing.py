"""Route selection: the subnet's table (or the VPC's main table), longest prefix match, target health.

A destination may be a range (a CIDR, S3's prefix list, "the internet"): it is split into the pieces
each route decides, so "0.0.0.0/0 except the VPC" and "S3 via the gateway endpoint, the rest via NAT"
come out exactly. Prefix-list routes match per entry; on equal prefix length a CIDR route wins over a
prefix-list route (AWS's route priority), so both can sit in one table.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from fmdoctor.net import topology as t
from fmdoctor.net.space import Range, is_ipv4_cidr, merge
from fmdoctor.net.topology import Route, RouteTable, Topology

DEAD_NAT_STATES = frozenset({"deleted", "deleting", "failed"})


@dataclass(frozen=True)
class RouteChoice:
    """The route a part of the destination takes (``route`` None: no route matches that part)."""

    route: Route | None
    ranges: tuple[Range, ...]
    table_id: str = ""


def _entries(topology: Topology, route: Route) -> list[tuple[Range, int]]:
    """(address range, prefix length) per destination entry of a route."""
    if route.is_prefix_list:
        found = topology.prefix_lists.get(route.destination)
        cidrs = found.cidrs if found else ()
    else:
        cidrs = (route.destination,)
    out = []
    for cidr in cidrs:
        if is_ipv4_cidr(cidr):
            net = ipaddress.IPv4Network(cidr, strict=False)
            out.append(((int(net.network_address), int(net.broadcast_address)), net.prefixlen))
    return out


def lookup(topology: Topology, table: RouteTable, ranges: Sequence[Range], *,
           skip_kinds: frozenset[str] = frozenset()) -> list[RouteChoice]:
    """Split ``ranges`` by the route that longest-prefix-matches each part."""
    candidates: list[tuple[Range, tuple[int, int, int], Route]] = []
    for route in table.routes:
        if route.target_kind in skip_kinds:
            continue
        for span, length in _entries(topology, route):
            # Rank: longer prefix, then CIDR over prefix list, then local first.
            rank = (length, 0 if route.is_prefix_list else 1, 1 if route.target_kind == t.LOCAL else 0)
            candidates.append((span, rank, route))
    pieces: list[tuple[Range, Route | None]] = []
    for lo, hi in merge(ranges):
        relevant = [c for c in candidates if c[0][0] <= hi and lo <= c[0][1]]
        cuts = {lo, hi + 1}
        for (c_lo, c_hi), _, _ in relevant:
            cuts.update(x for x in (c_lo, c_hi + 1) if lo < x <= hi)
        points = sorted(cuts)
        for start, end in zip(points, points[1:], strict=False):
            covering = [c for c in relevant if c[0][0] <= start and end - 1 <= c[0][1]]
            best = max(covering, key=lambda c: c[1])[2] if covering else None
            pieces.append(((start, end - 1), best))
    grouped: dict[int, tuple[Route | None, list[Range]]] = {}
    for span, chosen in pieces:
        grouped.setdefault(id(chosen), (chosen, []))[1].append(span)
    return [RouteChoice(chosen, merge(spans), table.id) for chosen, spans in grouped.values()]


def dead_target(topology: Topology, route: Route, vpc_id: str) -> str | None:
    """Why the route is a blackhole, or None when its target is usable.

    AWS marks such routes ``blackhole`` itself; the target's own state is checked too, so a route to a
    NAT gateway that was deleted a minute ago (or an emulator that never marks routes) still reads right.
    """
    if route.state == "blackhole":
        return f"route {route.describe()} is a blackhole: its target no longer exists"
    if route.target_id is None:
        return f"route to {route.destination} has no target"
    if route.target_kind == t.NAT:
        nat = topology.nat_gateways.get(route.target_id)
        if nat is None:
            return f"NAT gateway {route.target_id} does not exist in the VPC"
        if nat.state in DEAD_NAT_STATES:
            return f"NAT gateway {nat.id} is {nat.state}"
    if route.target_kind == t.IGW and not topology.igw_attached(route.target_id, vpc_id):
        return f"internet gateway {route.target_id} is not attached to {vpc_id}"
    if route.target_kind == t.GATEWAY_ENDPOINT:
        endpoint = topology.vpc_endpoints.get(route.target_id)
        if endpoint is None or not endpoint.available:
            state = endpoint.state if endpoint else "missing"
            return f"gateway endpoint {route.target_id} is {state}"
    if route.target_kind == t.PEERING:
        peering = topology.peering_connections.get(route.target_id)
        if peering is not None and not peering.active:
            return f"peering connection {peering.id} is {peering.status}"
    return None


def detached_igw(topology: Topology, route: Route, vpc_id: str) -> bool:
    """The route names an internet gateway that is not attached to the VPC (detached, or attached elsewhere;
    AWS marks such a route ``blackhole``, but the missing attachment is the cause people need to hear)."""
    return route.target_kind == t.IGW and bool(route.target_id) and not topology.igw_attached(route.target_id or "",
                                                                                             vpc_id)


def table_for(topology: Topology, subnet_id: str, vpc_id: str | None) -> tuple[RouteTable | None, str]:
    """The subnet's route table and how it applies ('explicit association' or 'main route table')."""
    table, explicit = topology.route_table_for(subnet_id, vpc_id)
    return table, "explicit association" if explicit else "main route table"


def exits(topology: Topology, table: RouteTable) -> dict[str, list[str]]:
    """The ways out of a table by kind (internet gateway, NAT, endpoint...): evidence for 'no path' answers."""
    found: dict[str, list[str]] = {}
    for route in table.routes:
        if route.target_kind != t.LOCAL:
            found.setdefault(route.target_kind, []).append(route.describe())
    return found
