"""Fetch the forwarding plane of a set of VPCs: one filtered, paginated describe per resource kind.

Every describe is filtered by VPC id (all VPCs of a run in one filter), so the call count grows with
pages, never with instances or subnets. Prefix-list entries have no batch API: they are read only for
the lists a rule or route names, plus the region's S3 list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fmdoctor.engine.concurrency import all_at_once
from fmdoctor.engine.discovery import FILTER_VALUES_MAX, fetch_security_groups
from fmdoctor.engine.inventory import NetworkInterface, SecurityGroup, Subnet, chunked
from fmdoctor.engine.slots import waiting
from fmdoctor.net import topology as t
from fmdoctor.net.topology import Topology

# What fetch_topology calls; every check built on it declares these.
TOPOLOGY_IAM_ACTIONS = (
    "ec2:DescribeSubnets",
    "ec2:DescribeNetworkAcls",
    "ec2:DescribeRouteTables",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeNatGateways",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeManagedPrefixLists",
    "ec2:GetManagedPrefixListEntries",
    "ec2:DescribeVpcPeeringConnections",
    "ec2:DescribeNetworkInterfaces",
)

_ROUTE_TARGETS = (
    ("NatGatewayId", t.NAT),
    ("TransitGatewayId", t.TRANSIT),
    ("VpcPeeringConnectionId", t.PEERING),
    ("NetworkInterfaceId", t.INTERFACE),
    ("InstanceId", t.INSTANCE),
    ("LocalGatewayId", t.OTHER),
    ("CarrierGatewayId", t.OTHER),
    ("EgressOnlyInternetGatewayId", t.OTHER),
    ("CoreNetworkArn", t.OTHER),
)


def _pages(ec2: Any, operation: str, key: str, **kwargs: Any) -> Iterable[dict[str, Any]]:
    for page in ec2.get_paginator(operation).paginate(**kwargs):
        yield from page.get(key, [])


def _vpc_filter(name: str, vpc_ids: Sequence[str]) -> list[dict[str, Any]]:
    return [{"Name": name, "Values": list(vpc_ids)}]


def fetch_topology(ec2: Any, region: str, vpc_ids: Sequence[str],
                   security_groups: Iterable[SecurityGroup] = (),
                   subnets: Mapping[str, Subnet] | None = None) -> Topology:
    """Subnets, ACLs, route tables, gateways, endpoints (with interface endpoints' ENIs and groups) and the
    prefix lists they and ``security_groups`` name. ``subnets``: every subnet of ``vpc_ids``, already fetched
    (the inventory's, Inventory.subnets_for), so DescribeSubnets is not asked twice."""
    security_groups = list(security_groups)
    vpc_ids = sorted(set(vpc_ids))
    if not vpc_ids:
        return Topology(region=region)
    if len(vpc_ids) > FILTER_VALUES_MAX:
        raise ValueError("more VPCs than one EC2 filter accepts")
    jobs: dict[str, Callable[[], Any]] = {
        "subnets": (lambda: dict(subnets)) if subnets is not None else (lambda: _subnets(ec2, vpc_ids)),
        "acls": lambda: _network_acls(ec2, vpc_ids),
        "tables": lambda: _route_tables(ec2, vpc_ids),
        "igws": lambda: _internet_gateways(ec2, vpc_ids),
        "nats": lambda: _nat_gateways(ec2, vpc_ids),
        "endpoints": lambda: _vpc_endpoints(ec2, vpc_ids),
        "lists": lambda: _prefix_list_names(ec2),
    }
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="fmdoctor-topology") as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        parts = {name: future.result() for name, future in futures.items()}

    tables: dict[str, t.RouteTable] = parts["tables"]
    wanted = {r.destination for table in tables.values() for r in table.routes if r.is_prefix_list}
    wanted |= {rule.prefix_list_id for g in security_groups for rule in g.rules if rule.prefix_list_id}
    names: dict[str, str] = parts["lists"]
    wanted |= {pid for pid, name in names.items() if name in (f"com.amazonaws.{region}.s3",
                                                                 f"com.amazonaws.{region}.s3express")}
    peering_ids = sorted({r.target_id for table in tables.values() for r in table.routes
                          if r.target_kind == t.PEERING and r.target_id})
    endpoint_enis = sorted({e for ep in parts["endpoints"].values() if ep.endpoint_type == "Interface"
                            for e in ep.interface_ids})
    known = {g.id: g for g in security_groups}

    def endpoint_side() -> tuple[dict[str, NetworkInterface], dict[str, SecurityGroup]]:
        found = fetch_interfaces(ec2, ids=endpoint_enis) if endpoint_enis else {}
        return found, fetch_missing_groups(ec2, {g for e in found.values() for g in e.security_group_ids}, known)

    # What the first describes named, fetched at once: the endpoints' interfaces (then their groups), the prefix
    # lists' entries and the peering connections; then the entries of lists only those groups name.
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="fmdoctor-topology") as pool:
        side = pool.submit(endpoint_side)
        first_lists = pool.submit(fetch_prefix_lists, ec2, sorted(wanted), names)
        peerings = pool.submit(_peering_connections, ec2, peering_ids)
        with waiting():
            interfaces, groups = side.result()
            prefix_lists = first_lists.result()
            peering = peerings.result()
    later = {rule.prefix_list_id for g in groups.values() for rule in g.rules if rule.prefix_list_id} - wanted
    prefix_lists.update(fetch_prefix_lists(ec2, sorted(later), names))
    return Topology(
        region=region,
        vpc_ids=tuple(vpc_ids),
        subnets=parts["subnets"],
        network_acls=parts["acls"],
        route_tables=tables,
        internet_gateways=parts["igws"],
        nat_gateways=parts["nats"],
        vpc_endpoints=parts["endpoints"],
        prefix_lists=dict(sorted(prefix_lists.items())),
        peering_connections=peering,
        interfaces=interfaces,
        security_groups=groups,
    )


def _subnets(ec2: Any, vpc_ids: Sequence[str]) -> dict[str, Subnet]:
    return {
        raw["SubnetId"]: Subnet(raw["SubnetId"], raw["VpcId"], raw.get("AvailabilityZone", ""),
                                raw.get("CidrBlock", ""), raw.get("AvailabilityZoneId", ""))
        for raw in _pages(ec2, "describe_subnets", "Subnets", Filters=_vpc_filter("vpc-id", vpc_ids))
    }


def _network_acls(ec2: Any, vpc_ids: Sequence[str]) -> dict[str, t.NetworkAcl]:
    acls = {}
    for raw in _pages(ec2, "describe_network_acls", "NetworkAcls", Filters=_vpc_filter("vpc-id", vpc_ids)):
        entries = tuple(
            t.NaclEntry(
                rule_number=int(e["RuleNumber"]),
                egress=bool(e.get("Egress")),
                protocol=str(e.get("Protocol", "-1")),
                allow=e.get("RuleAction") == "allow",
                cidr=e.get("CidrBlock"),
                from_port=(e.get("PortRange") or {}).get("From"),
                to_port=(e.get("PortRange") or {}).get("To"),
            )
            for e in raw.get("Entries", [])
        )
        subnets = tuple(a["SubnetId"] for a in raw.get("Associations", []) if a.get("SubnetId"))
        acls[raw["NetworkAclId"]] = t.NetworkAcl(raw["NetworkAclId"], raw["VpcId"], bool(raw.get("IsDefault")),
                                                 entries, subnets)
    return acls


def _route(raw: dict[str, Any]) -> t.Route | None:
    destination = raw.get("DestinationCidrBlock") or raw.get("DestinationPrefixListId")
    if not destination:
        return None  # IPv6 routes: IPv6 flows are not evaluated
    gateway = raw.get("GatewayId")
    kind, target = t.OTHER, None
    if gateway == "local":
        kind, target = t.LOCAL, "local"
    elif gateway and gateway.startswith("igw-"):
        kind, target = t.IGW, gateway
    elif gateway and gateway.startswith("vpce-"):
        kind, target = t.GATEWAY_ENDPOINT, gateway
    elif gateway and gateway.startswith("vgw-"):
        kind, target = t.VPN, gateway
    else:
        for key, named_kind in _ROUTE_TARGETS:
            if raw.get(key):
                kind, target = named_kind, raw[key]
                break
    return t.Route(destination, kind, target, raw.get("State", "active"), raw.get("Origin", ""))


def _route_tables(ec2: Any, vpc_ids: Sequence[str]) -> dict[str, t.RouteTable]:
    tables = {}
    for raw in _pages(ec2, "describe_route_tables", "RouteTables", Filters=_vpc_filter("vpc-id", vpc_ids)):
        associations = raw.get("Associations", [])
        routes = tuple(r for r in map(_route, raw.get("Routes", [])) if r is not None)
        tables[raw["RouteTableId"]] = t.RouteTable(
            id=raw["RouteTableId"],
            vpc_id=raw["VpcId"],
            main=any(a.get("Main") for a in associations),
            subnet_ids=tuple(a["SubnetId"] for a in associations if a.get("SubnetId")),
            routes=routes,
        )
    return tables


def _internet_gateways(ec2: Any, vpc_ids: Sequence[str]) -> dict[str, t.InternetGateway]:
    return {
        raw["InternetGatewayId"]: t.InternetGateway(
            raw["InternetGatewayId"],
            tuple(a["VpcId"] for a in raw.get("Attachments", []) if a.get("State") in ("available", "attached")),
        )
        for raw in _pages(ec2, "describe_internet_gateways", "InternetGateways",
                          Filters=_vpc_filter("attachment.vpc-id", vpc_ids))
    }


def _nat_gateways(ec2: Any, vpc_ids: Sequence[str]) -> dict[str, t.NatGateway]:
    gateways = {}
    for raw in _pages(ec2, "describe_nat_gateways", "NatGateways", Filter=_vpc_filter("vpc-id", vpc_ids)):
        addresses = raw.get("NatGatewayAddresses", [])
        gateways[raw["NatGatewayId"]] = t.NatGateway(
            id=raw["NatGatewayId"],
            vpc_id=raw.get("VpcId", ""),
            subnet_id=raw.get("SubnetId", ""),
            state=raw.get("State", "unknown"),
            connectivity=raw.get("ConnectivityType", "public"),
            public_ips=tuple(a["PublicIp"] for a in addresses if a.get("PublicIp")),
            private_ips=tuple(a["PrivateIp"] for a in addresses if a.get("PrivateIp")),
        )
    return gateways


def _vpc_endpoints(ec2: Any, vpc_ids: Sequence[str]) -> dict[str, t.VpcEndpoint]:
    return {
        raw["VpcEndpointId"]: t.VpcEndpoint(
            id=raw["VpcEndpointId"],
            vpc_id=raw.get("VpcId", ""),
            service_name=raw.get("ServiceName", ""),
            endpoint_type=raw.get("VpcEndpointType", "Gateway"),
            state=raw.get("State", "unknown"),
            route_table_ids=tuple(raw.get("RouteTableIds", [])),
            subnet_ids=tuple(raw.get("SubnetIds", [])),
            group_ids=tuple(g["GroupId"] for g in raw.get("Groups", [])),
            interface_ids=tuple(raw.get("NetworkInterfaceIds", [])),
            private_dns=bool(raw.get("PrivateDnsEnabled")),
            policy=raw.get("PolicyDocument"),
        )
        for raw in _pages(ec2, "describe_vpc_endpoints", "VpcEndpoints", Filters=_vpc_filter("vpc-id", vpc_ids))
    }


def _prefix_list_names(ec2: Any) -> dict[str, str]:
    # One paginated listing covers the AWS-managed lists (S3's among them) and the account's own.
    return {raw["PrefixListId"]: raw.get("PrefixListName", "")
            for raw in _pages(ec2, "describe_managed_prefix_lists", "PrefixLists")}


def fetch_prefix_lists(ec2: Any, ids: Sequence[str], names: dict[str, str] | None = None) -> dict[str, t.PrefixList]:
    names = names if names is not None else _prefix_list_names(ec2)
    # Named by a rule but not visible to this account: its CIDRs stay unknown. The rest, one listing each, at once.
    visible = [pid for pid in ids if pid in names]

    def entries(prefix_list_id: str) -> t.PrefixList:
        cidrs = tuple(e["Cidr"] for e in _pages(ec2, "get_managed_prefix_list_entries", "Entries",
                                                 PrefixListId=prefix_list_id) if e.get("Cidr"))
        return t.PrefixList(prefix_list_id, names[prefix_list_id], cidrs)

    return dict(zip(visible, all_at_once(entries, visible, name="fmdoctor-prefix-lists"), strict=True))


def _peering_connections(ec2: Any, ids: Sequence[str]) -> dict[str, t.PeeringConnection]:
    found = {}
    for batch in chunked(ids, FILTER_VALUES_MAX):
        filters = [{"Name": "vpc-peering-connection-id", "Values": batch}]
        for raw in _pages(ec2, "describe_vpc_peering_connections", "VpcPeeringConnections", Filters=filters):
            found[raw["VpcPeeringConnectionId"]] = t.PeeringConnection(
                id=raw["VpcPeeringConnectionId"],
                requester_vpc_id=(raw.get("RequesterVpcInfo") or {}).get("VpcId", ""),
                accepter_vpc_id=(raw.get("AccepterVpcInfo") or {}).get("VpcId", ""),
                status=(raw.get("Status") or {}).get("Code", "unknown"),
            )
    return found


def fetch_interfaces(ec2: Any, *, ids: Sequence[str] = (), filters: Sequence[dict[str, Any]] = ()
                     ) -> dict[str, NetworkInterface]:
    """Interfaces outside the cluster inventory (FSx, endpoints, a named ENI or IP), batched by id."""
    raws: list[dict[str, Any]] = []
    for batch in chunked(sorted(set(ids)), FILTER_VALUES_MAX):
        raws += _pages(ec2, "describe_network_interfaces", "NetworkInterfaces",
                       Filters=[{"Name": "network-interface-id", "Values": batch}])
    if filters:
        raws += _pages(ec2, "describe_network_interfaces", "NetworkInterfaces", Filters=list(filters))
    return {raw["NetworkInterfaceId"]: interface_from(raw) for raw in raws}


def interface_from(raw: dict[str, Any]) -> NetworkInterface:
    attachment = raw.get("Attachment") or {}
    ips = tuple(p["PrivateIpAddress"] for p in raw.get("PrivateIpAddresses", []) if p.get("PrivateIpAddress"))
    return NetworkInterface(
        id=raw["NetworkInterfaceId"],
        subnet_id=raw.get("SubnetId", ""),
        vpc_id=raw.get("VpcId"),
        security_group_ids=tuple(sorted(g["GroupId"] for g in raw.get("Groups", []))),
        private_ips=ips or ((raw["PrivateIpAddress"],) if raw.get("PrivateIpAddress") else ()),
        public_ip=(raw.get("Association") or {}).get("PublicIp"),
        interface_type=raw.get("InterfaceType") or "interface",
        instance_id=attachment.get("InstanceId"),
        device_index=attachment.get("DeviceIndex"),
        network_card_index=attachment.get("NetworkCardIndex"),
        description=raw.get("Description", ""),
        ipv6_ips=tuple(a["Ipv6Address"] for a in raw.get("Ipv6Addresses", []) if a.get("Ipv6Address")),
    )


def fetch_missing_groups(ec2: Any, group_ids: Iterable[str], known: dict[str, SecurityGroup]
                         ) -> dict[str, SecurityGroup]:
    missing = sorted({g for g in group_ids if g not in known})
    return fetch_security_groups(ec2, missing) if missing else {}
