"""The path evaluation: which components a flow crosses, in order, and the first that drops it.

Three shapes of path, as a network engineer would trace them:

* inside AWS (interface to interface): source SG egress, subnet ACL out, route, destination ACL in,
  destination SG ingress; then the reply, which security groups admit by state but ACLs and routes
  must pass again (to and from the ephemeral ports).
* out of the VPC (to a CIDR, the internet or S3): SG egress, ACL out, route by longest prefix, then the
  way out: an internet gateway (the interface needs a public IP), a NAT gateway (whose own subnet ACL
  and routes count too), a gateway endpoint (S3), peering/transit/VPN (evaluated up to the VPC's edge).
* into the VPC from outside: the destination subnet's route for the reply decides how traffic can
  come in (an internet gateway needs a public IP; a NAT gateway admits nothing inbound), then ACL in,
  SG ingress and the reply's ACL out.

Same-subnet traffic crosses no ACL and no route table. EFA flows admit only all-traffic rules that
reference a group of the peer, and never leave their Availability Zone or VPC (fmdoctor.net.efa).
"""

from __future__ import annotations

import dataclasses

from fmdoctor.net import topology as t
from fmdoctor.net.hops import Stop, Trace
from fmdoctor.net.model import NAT_NO_INBOUND, NO_PUBLIC_IP, NO_ROUTE, Endpoint, Flow, ReachabilityResult
from fmdoctor.net.network import Network, group_interfaces
from fmdoctor.net.policy import endpoint_policy
from fmdoctor.net.routing import RouteChoice, table_for
from fmdoctor.net.sg_hop import security_group_hop
from fmdoctor.net.topology import VpcEndpoint

BEYOND = {
    t.PEERING: "peering connection",
    t.TRANSIT: "transit gateway (its route tables are not evaluated)",
    t.VPN: "virtual private gateway (the VPN/Direct Connect side is not evaluated)",
    t.INTERFACE: "network interface (an appliance: what it forwards is not evaluated)",
    t.INSTANCE: "instance (an appliance: what it forwards is not evaluated)",
    t.OTHER: "gateway fmdoctor does not evaluate",
}


def analyze_endpoints(network: Network, source: Endpoint, destination: Endpoint, flow: Flow) -> ReachabilityResult:
    """Evaluate one flow between resolved endpoints (see :func:`fmdoctor.net.reachability.analyze`)."""
    trace = Trace(network, flow, source, destination)
    try:
        if source.internal and destination.internal:
            _internal(trace, source, destination)
        elif source.internal and (endpoint := _s3_interface_endpoint(network, source, destination)):
            _via_interface_endpoint(trace, source, destination, endpoint)
        elif source.internal:
            _outbound(trace, source, destination)
        elif destination.internal:
            _inbound(trace, source, destination)
        else:
            raise ValueError("one end of the flow must be an interface in a VPC")
    except Stop:
        pass
    if trace.blocked is not None:
        reachable: bool | None = False
    else:
        reachable = None if any(h.verdict == "unverified" for h in trace.hops) else True
    return ReachabilityResult(reachable, source, destination, flow, tuple(trace.hops), trace.blocked,
                              trace.partial if trace.blocked is not None else None,
                              tuple(trace.caveats) if trace.blocked is None else ())


def _internal(trace: Trace, src: Endpoint, dst: Endpoint) -> None:
    flow = trace.flow
    trace.hop("eni", src.resource, src.label)
    if flow.efa:
        _efa(trace, src, dst)
        return
    security_group_hop(trace, src, True, dst)
    same_subnet = src.subnet_id == dst.subnet_id
    if same_subnet:
        trace.skip_acls_same_subnet(src.subnet_id or "?")
    else:
        trace.nacl(src.subnet_id or "", src.vpc_id, True, dst, flow.services())
        for choice in trace.routes(src.subnet_id or "", src.vpc_id or "", dst):
            _between_vpcs(trace, src, dst, choice, "forward")
        trace.nacl(dst.subnet_id or "", dst.vpc_id, False, src, flow.services())
    security_group_hop(trace, dst, False, src)
    trace.hop("sg-state", dst.resource, "replies are admitted: security groups are stateful", direction="return")
    if not same_subnet:
        trace.reply_nacl(dst.subnet_id or "", dst.vpc_id, True, src, trace.reply_clients())
        for choice in trace.routes(dst.subnet_id or "", dst.vpc_id or "", src, direction="return"):
            _between_vpcs(trace, dst, src, choice, "return")
        trace.reply_nacl(src.subnet_id or "", src.vpc_id, False, dst, trace.reply_clients())
    trace.hop("destination", dst.resource, dst.label)


def _efa(trace: Trace, src: Endpoint, dst: Endpoint) -> None:
    """EFA's OS-bypass (SRD) traffic: one zone and VPC, then the receiver's groups. It is not routed and its
    addresses are not IP addresses, so route tables and network ACLs (which match IP addresses) take no part;
    the EFA guide names security groups as what admits it."""
    trace.efa_zones(src, dst)
    security_group_hop(trace, src, True, dst)
    if src.subnet_id != dst.subnet_id:
        trace.hop("route", src.subnet_id or "?", "EFA traffic is not routed: route tables and network ACLs do not "
                  "apply to it, security groups decide", rule="efa")
    security_group_hop(trace, dst, False, src)
    trace.hop("destination", dst.resource, dst.label)


def _between_vpcs(trace: Trace, src: Endpoint, dst: Endpoint, choice: RouteChoice, direction: str) -> None:
    route = choice.route
    assert route is not None
    kind = route.target_kind
    if kind == t.LOCAL:
        if src.vpc_id == dst.vpc_id:
            trace.route_hop(src.subnet_id or "", choice, f"local route: {dst.label} is in {src.vpc_id}", direction)
            return
    elif kind == t.PEERING:
        peering = trace.network.topology.peering_connections.get(route.target_id or "")
        if peering is not None and {src.vpc_id, dst.vpc_id} == {peering.requester_vpc_id, peering.accepter_vpc_id}:
            trace.route_hop(src.subnet_id or "", choice, f"through peering connection {peering.id} to {dst.vpc_id}",
                            direction)
            return
        if peering is None:
            trace.route_hop(src.subnet_id or "", choice, f"through peering connection {route.target_id} (not found)",
                            direction, verdict="unverified")
            return
    elif kind in BEYOND:
        trace.route_hop(src.subnet_id or "", choice, f"through {route.target_id}, a {BEYOND[kind]}", direction,
                        verdict="unverified")
        return
    table, _ = table_for(trace.network.topology, src.subnet_id or "", src.vpc_id)
    trace.block(
        NO_ROUTE, "route", table.id if table else src.subnet_id or "?",
        f"{dst.part_label(choice.ranges)} is routed to {route.target_id}, which does not lead "
        f"to {dst.vpc_id}", f"route {dst.label}'s addresses to a peering connection or transit gateway that reaches "
        f"{dst.vpc_id}", direction=direction, rule=route.describe(), destination_vpc=dst.vpc_id,
    )


def _outbound(trace: Trace, src: Endpoint, dst: Endpoint) -> None:
    flow = trace.flow
    trace.hop("eni", src.resource, src.label)
    security_group_hop(trace, src, True, dst)
    trace.nacl(src.subnet_id or "", src.vpc_id, True, dst, flow.services())
    choices = trace.routes(src.subnet_id or "", src.vpc_id or "", dst)
    for choice in choices:
        # The part of the destination this route decides, labelled as such in the hops that follow; when
        # parts leave by different ways (the internet through a NAT gateway, S3's prefix list through a
        # gateway endpoint), each way's hops carry its name.
        part = dataclasses.replace(dst.with_addresses(choice.ranges), label=dst.part_label(choice.ranges))
        trace.path = _way_out(trace.network, part, choice) if len(choices) > 1 else None
        _exit(trace, src, part, choice)
    trace.path = None
    trace.hop("destination", dst.resource, dst.label)


_WAYS = {t.NAT: "NAT gateway", t.IGW: "internet gateway", t.GATEWAY_ENDPOINT: "gateway endpoint"}


def _way_out(network: Network, part: Endpoint, choice: RouteChoice) -> str:
    """'part of the internet (81 CIDRs) via NAT gateway nat-1', 'S3 (pl-1) via gateway endpoint vpce-1'."""
    route = choice.route
    if route is None:
        return part.label
    kind = _WAYS.get(route.target_kind, BEYOND.get(route.target_kind, "target"))
    endpoint = network.topology.vpc_endpoints.get(route.target_id or "")
    if route.target_kind == t.GATEWAY_ENDPOINT and endpoint is not None:  # its prefix list: the service
        return f"{endpoint.service_name.rsplit('.', 1)[-1].upper()} ({route.destination}) via {kind} {endpoint.id}"
    return f"{part.label} via {kind} {route.target_id}"


def _s3_interface_endpoint(network: Network, src: Endpoint, dst: Endpoint) -> VpcEndpoint | None:
    """The S3 interface endpoint S3 names resolve to from ``src``: only without a gateway endpoint route
    (which wins for VPC-internal clients) and with private DNS, in the bucket's own region."""
    topology = network.topology
    if dst.kind != "s3" or dst.service != "s3" or (dst.bucket_region or topology.region) != topology.region:
        return None
    table, _ = table_for(topology, src.subnet_id or "", src.vpc_id)
    if table is not None and any(r.is_prefix_list and r.destination in dst.prefix_list_ids for r in table.routes):
        return None
    return next((e for e in topology.s3_endpoints(src.vpc_id or "")
                 if e.endpoint_type == "Interface" and e.available and e.private_dns), None)


def _via_interface_endpoint(trace: Trace, src: Endpoint, dst: Endpoint, endpoint: VpcEndpoint) -> None:
    network = trace.network
    members = [network.interfaces[e] for e in endpoint.interface_ids if e in network.interfaces]
    endpoint_policy(trace, endpoint, f"S3 names resolve to interface endpoint {endpoint.id} (private DNS)")
    if not members:
        trace.unverified("vpc-endpoint", endpoint.id, f"the interfaces of {endpoint.id} were not found")
        return
    # Regional names resolve to the endpoint's interfaces in every subnet: each must admit the flow.
    for (subnet, _, _), alike in group_interfaces(members, by_public_ip=False).items():
        label = f"interface endpoint {endpoint.id} ({len(alike)} interface{'s' if len(alike) > 1 else ''} in {subnet})"
        _internal(trace, src, network.class_endpoint(alike, label, endpoint.id))
    trace.hop("destination", dst.resource, dst.label)


def _exit(trace: Trace, src: Endpoint, dst: Endpoint, choice: RouteChoice) -> None:
    route = choice.route
    assert route is not None
    topology = trace.network.topology
    subnet = src.subnet_id or ""
    part = dst.part_label(choice.ranges)
    if route.target_kind == t.IGW:
        trace.route_hop(subnet, choice, f"{part} via internet gateway {route.target_id}")
        if not src.public_ip:
            trace.block(NO_PUBLIC_IP, "public-ip", src.resource,
                        f"{src.label} has no public or Elastic IP, so it cannot use internet gateway "
                        f"{route.target_id}", f"associate an Elastic IP with {src.resource}, or route {subnet} through "
                        "a NAT gateway", internet_gateway=route.target_id, subnet=subnet)
        trace.hop("internet-gateway", route.target_id or "", f"leaves as {src.public_ip}")
    elif route.target_kind == t.NAT:
        _through_nat(trace, src, dst, choice)
        return
    elif route.target_kind == t.GATEWAY_ENDPOINT:
        endpoint = topology.vpc_endpoints[route.target_id or ""]
        trace.route_hop(subnet, choice, f"{part} ({route.destination}) via gateway endpoint {endpoint.id}")
        endpoint_policy(trace, endpoint, f"gateway endpoint for {endpoint.service_name}")
    elif route.target_kind == t.LOCAL:
        trace.route_hop(subnet, choice, f"{part} is inside {src.vpc_id} but no interface was named there",
                        verdict="unverified")
    else:
        trace.route_hop(subnet, choice, f"{part} leaves {src.vpc_id} through {route.target_id}, a "
                        f"{BEYOND.get(route.target_kind, 'gateway')}; beyond it is not evaluated", verdict="unverified")
    trace.reply_nacl(subnet, src.vpc_id, False, dst, trace.reply_clients())


def _through_nat(trace: Trace, src: Endpoint, dst: Endpoint, choice: RouteChoice) -> None:
    flow, topology = trace.flow, trace.network.topology
    nat = topology.nat_gateways[choice.route.target_id or ""]  # type: ignore[union-attr]
    subnet = src.subnet_id or ""
    trace.route_hop(subnet, choice, f"{dst.part_label(choice.ranges)} via NAT gateway {nat.id} in "
                    f"{nat.subnet_id}")
    own_subnet = nat.subnet_id == subnet
    if not own_subnet:
        trace.nacl(nat.subnet_id, nat.vpc_id, False, src, flow.services())
    onward_choices = trace.routes(nat.subnet_id, nat.vpc_id, dst)
    trace.nacl(nat.subnet_id, nat.vpc_id, True, dst, flow.services())
    for onward in onward_choices:
        route = onward.route
        assert route is not None
        if route.target_kind == t.IGW and nat.connectivity == "public":
            trace.route_hop(nat.subnet_id, onward, f"NAT subnet {nat.subnet_id} routes to internet gateway "
                            f"{route.target_id}")
            trace.hop("nat-gateway", nat.id, f"translates to {', '.join(nat.public_ips) or 'its Elastic IP'}")
            trace.hop("internet-gateway", route.target_id or "", "to the internet")
        elif route.target_kind == t.IGW:
            trace.block(NO_PUBLIC_IP, "nat-gateway", nat.id,
                        f"NAT gateway {nat.id} is a private NAT gateway: it cannot use internet gateway "
                        f"{route.target_id}", "route through a public NAT gateway", connectivity=nat.connectivity)
        elif route.target_kind in (t.NAT, t.LOCAL, t.GATEWAY_ENDPOINT):
            table, _ = table_for(topology, nat.subnet_id, nat.vpc_id)
            trace.block(NO_ROUTE, "route", table.id if table else nat.subnet_id,
                        f"NAT gateway {nat.id}'s subnet {nat.subnet_id} routes {dst.label} to {route.target_id}, "
                        "which does not lead out of the VPC",
                        f"route {nat.subnet_id}'s traffic for it to an internet gateway", rule=route.describe())
        else:
            trace.route_hop(nat.subnet_id, onward, f"NAT subnet routes to {route.target_id}, a "
                            f"{BEYOND.get(route.target_kind, 'gateway')}; beyond it is not evaluated",
                            verdict="unverified")
    trace.reply_nacl(nat.subnet_id, nat.vpc_id, False, dst, trace.reply_clients(at_nat=True))
    if not own_subnet:
        trace.reply_nacl(nat.subnet_id, nat.vpc_id, True, src, trace.reply_clients())
        trace.reply_nacl(subnet, src.vpc_id, False, dst, trace.reply_clients())


def _inbound(trace: Trace, src: Endpoint, dst: Endpoint) -> None:
    flow = trace.flow
    subnet = dst.subnet_id or ""
    trace.hop("source", src.resource, src.label)
    # Replies leave the way the destination subnet routes the source; that is also the only way in.
    for choice in trace.routes(subnet, dst.vpc_id or "", src, direction="return",
                               skip_kinds=frozenset({t.GATEWAY_ENDPOINT})):
        route = choice.route
        assert route is not None
        part = src.part_label(choice.ranges)
        if route.target_kind == t.IGW:
            trace.route_hop(subnet, choice, f"replies to {part} leave through internet gateway {route.target_id}",
                            "return")
            if not dst.public_ip:
                trace.block(NO_PUBLIC_IP, "public-ip", dst.resource,
                            f"{dst.label} has no public or Elastic IP, so nothing from {src.label} can reach it "
                            f"through internet gateway {route.target_id}",
                            f"associate an Elastic IP with {dst.resource}, or connect through a bastion host or "
                            "SSM Session Manager", internet_gateway=route.target_id,
                            subnet=subnet)
            trace.hop("internet-gateway", route.target_id or "", f"arrives at public IP {dst.public_ip}")
        elif route.target_kind == t.NAT:
            trace.block(NAT_NO_INBOUND, "route", route.target_id or "",
                        f"{subnet} reaches {part} through NAT gateway {route.target_id}, which admits no inbound "
                        f"connections: {dst.label} cannot be reached from {src.label}",
                        "put it in a public subnet with a public IP, or connect through a bastion host, a VPN or SSM "
                        "Session Manager", direction="return",
                        rule=route.describe(), subnet=subnet)
        elif route.target_kind == t.LOCAL:
            trace.route_hop(subnet, choice, f"{part} is inside {dst.vpc_id}", "return", verdict="unverified")
        else:
            trace.route_hop(subnet, choice, f"arrives through {route.target_id}, a "
                            f"{BEYOND.get(route.target_kind, 'gateway')}; beyond it is not evaluated", "return",
                            verdict="unverified")
    trace.nacl(subnet, dst.vpc_id, False, src, flow.services())
    security_group_hop(trace, dst, False, src)
    trace.hop("sg-state", dst.resource, "replies are admitted: security groups are stateful", direction="return")
    trace.reply_nacl(subnet, dst.vpc_id, True, src, trace.reply_clients())
    trace.hop("destination", dst.resource, dst.label)
