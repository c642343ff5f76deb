"""Fix hints for blocking routes: only targets the VPC already has, so ``fmdoctor fix`` can apply them.

A missing route for S3 becomes the route table added to an existing S3 gateway endpoint
(``modify-vpc-endpoint``); a missing route out of the VPC, a route to an internet gateway that is not attached
and a route to a dead NAT gateway become ``create-route`` / ``replace-route`` to an attached internet gateway
(for interfaces with a public IP) or a live public NAT gateway whose own subnet leads out. Where the VPC has
no such target (or a NAT could not help: inbound connections), the hint list stays empty and the prose
remedy says what to build.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fmdoctor.net import topology as t
from fmdoctor.net.model import Endpoint
from fmdoctor.net.routing import table_for
from fmdoctor.net.space import Range, cidrs_of
from fmdoctor.net.topology import Route, RouteTable, Topology

DESTINATIONS_MAX = 4
ANYWHERE = "0.0.0.0/0"


def attached_igws(topology: Topology, vpc_id: str) -> list[str]:
    return sorted(g.id for g in topology.internet_gateways.values() if vpc_id in g.attached_vpc_ids)


def usable_nats(topology: Topology, vpc_id: str, table: RouteTable) -> list[str]:
    """Available public NAT gateways of the VPC outside the subnets ``table`` routes, whose subnet routes the
    internet to an attached internet gateway (a NAT behind the very table being fixed would loop)."""
    found = []
    for nat in sorted(topology.nat_gateways.values(), key=lambda n: n.id):
        if nat.vpc_id != vpc_id or nat.state != "available" or nat.connectivity != "public":
            continue
        own, _ = table_for(topology, nat.subnet_id, vpc_id)
        if own is None or own.id == table.id:
            continue
        if any(r.destination == ANYWHERE and r.target_kind == t.IGW and r.target_id
               and topology.igw_attached(r.target_id, vpc_id) for r in own.routes):
            found.append(nat.id)
    return found


def _target(topology: Topology, vpc_id: str, table: RouteTable, sender: Endpoint | None, inbound: bool
            ) -> dict[str, str] | None:
    """The way out a route should name: the IGW for a public sender (or a NAT gateway's own subnet), else a NAT."""
    igws = attached_igws(topology, vpc_id)
    public = sender is None or bool(sender.public_ip)
    if igws and public:
        return {"gateway_id": igws[0]}
    if inbound:  # replies of inbound connections: a NAT gateway admits none, a private interface takes none
        return None
    nats = usable_nats(topology, vpc_id, table)
    return {"nat_gateway_id": nats[0]} if nats else None


def missing_route_fix(topology: Topology, table: RouteTable, vpc_id: str, sender: Endpoint | None,
                      destination: Endpoint, ranges: Sequence[Range], direction: str) -> list[dict[str, Any]]:
    """Hints for a table with no route for ``ranges`` of ``destination``, as ``sender`` (None: a NAT) sends."""
    if destination.internal:
        return []  # another VPC: peering and transit gateways are decisions, not defaults
    if destination.kind == "s3" and destination.prefix_list_ids and direction == "forward":
        gateways = [e for e in topology.s3_endpoints(vpc_id, destination.service)
                    if e.endpoint_type == "Gateway" and e.available]
        if gateways:
            return [{"action": "modify-vpc-endpoint", "vpc_endpoint_id": gateways[0].id,
                     "add_route_table_ids": [table.id]}]
    target = _target(topology, vpc_id, table, sender, inbound=direction == "return")
    if target is None:
        return []
    cidrs = cidrs_of(ranges, DESTINATIONS_MAX)
    if destination.kind in ("internet", "s3") or any(c.startswith("...") for c in cidrs):
        cidrs = [ANYWHERE]
    return [{"action": "create-route", "route_table_id": table.id, "destination": c, **target} for c in cidrs]


def replacement_fix(topology: Topology, table: RouteTable, vpc_id: str, route: Route, sender: Endpoint | None,
                    destination: Endpoint, direction: str) -> list[dict[str, Any]]:
    """A route out of the VPC to a dead NAT gateway or a detached internet gateway, pointed at a live target."""
    if destination.internal or route.is_prefix_list or route.target_kind not in (t.NAT, t.IGW):
        return []
    if route.target_kind == t.IGW:
        igws = attached_igws(topology, vpc_id)
        target: dict[str, str] | None = {"gateway_id": igws[0]} if igws else None
    else:
        target = _target(topology, vpc_id, table, sender, inbound=direction == "return")
    if target is None:
        return []
    return [{"action": "replace-route", "route_table_id": table.id, "destination": route.destination, **target}]


def describe(hints: Sequence[dict[str, Any]]) -> str | None:
    """The hints in words, for the remedy people read; None when there are none."""
    words = []
    for hint in hints:
        if hint["action"] == "modify-vpc-endpoint":
            tables = ", ".join(hint["add_route_table_ids"])
            words.append(f"add {tables} to S3 gateway endpoint {hint['vpc_endpoint_id']} (it adds the service's "
                         "prefix-list route)")
        else:
            target = hint.get("gateway_id") or hint.get("nat_gateway_id")
            verb = "add a route" if hint["action"] == "create-route" else "point the route"
            words.append(f"{verb} for {hint['destination']} in {hint['route_table_id']} to {target}")
    return "; ".join(words) or None
