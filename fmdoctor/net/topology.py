"""A VPC's forwarding plane as plain data: network ACLs, route tables, gateways, endpoints, prefix lists.

Fetched once per run (:mod:`fmdoctor.net.fetch`), then every reachability question is a pure function
over it. The shapes follow the EC2 Describe* responses, reduced to what the evaluation reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from fmdoctor.engine.inventory import NetworkInterface, SecurityGroup, Subnet
from fmdoctor.net.space import Range, cidr_range, is_ipv4_cidr, merge

IMPLICIT_DENY_RULE = 32767  # the '*' rule every network ACL ends with


@dataclass(frozen=True)
class NaclEntry:
    rule_number: int
    egress: bool
    protocol: str  # "-1", "6", "17", "1" or another protocol number, as DescribeNetworkAcls returns it
    allow: bool
    cidr: str | None = None  # IPv4 only; IPv6 entries are kept out of the evaluation
    from_port: int | None = None
    to_port: int | None = None

    def describe(self) -> str:
        number = "*" if self.rule_number >= IMPLICIT_DENY_RULE else str(self.rule_number)
        ports = ""
        if self.from_port is not None and self.protocol in ("6", "17"):
            ports = f"/{self.from_port}" if self.from_port == self.to_port else f"/{self.from_port}-{self.to_port}"
        proto = {"-1": "all", "6": "tcp", "17": "udp", "1": "icmp"}.get(self.protocol, f"proto {self.protocol}")
        direction = "outbound" if self.egress else "inbound"
        return f"rule {number} {direction} {'allow' if self.allow else 'deny'} {proto}{ports} {self.cidr}"


@dataclass(frozen=True)
class NetworkAcl:
    id: str
    vpc_id: str
    is_default: bool
    entries: tuple[NaclEntry, ...]
    subnet_ids: tuple[str, ...] = ()

    def ordered(self, egress: bool) -> list[NaclEntry]:
        return sorted((e for e in self.entries if e.egress == egress and e.cidr), key=lambda e: e.rule_number)


# Route target kinds, named after the field of the EC2 route that carries them.
LOCAL = "local"
IGW = "internet-gateway"
NAT = "nat-gateway"
GATEWAY_ENDPOINT = "vpc-endpoint"
PEERING = "vpc-peering"
TRANSIT = "transit-gateway"
VPN = "virtual-private-gateway"
INTERFACE = "network-interface"
INSTANCE = "instance"
OTHER = "other"


@dataclass(frozen=True)
class Route:
    destination: str  # a CIDR or a prefix-list id
    target_kind: str
    target_id: str | None
    state: str = "active"  # "blackhole" when AWS knows the target is gone
    origin: str = ""

    @property
    def is_prefix_list(self) -> bool:
        return self.destination.startswith("pl-")

    def describe(self) -> str:
        target = self.target_id or "no target"
        state = "" if self.state == "active" else f" ({self.state})"
        return f"{self.destination} -> {target}{state}"


@dataclass(frozen=True)
class RouteTable:
    id: str
    vpc_id: str
    main: bool
    subnet_ids: tuple[str, ...]
    routes: tuple[Route, ...]


@dataclass(frozen=True)
class InternetGateway:
    id: str
    attached_vpc_ids: tuple[str, ...]


@dataclass(frozen=True)
class NatGateway:
    id: str
    vpc_id: str
    subnet_id: str
    state: str
    connectivity: str = "public"  # or "private"
    public_ips: tuple[str, ...] = ()
    private_ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class VpcEndpoint:
    id: str
    vpc_id: str
    service_name: str
    endpoint_type: str  # "Gateway", "Interface", "GatewayLoadBalancer"
    state: str
    route_table_ids: tuple[str, ...] = ()
    subnet_ids: tuple[str, ...] = ()
    group_ids: tuple[str, ...] = ()
    interface_ids: tuple[str, ...] = ()
    private_dns: bool = False
    policy: str | None = None

    @property
    def available(self) -> bool:
        return self.state.lower() == "available"


@dataclass(frozen=True)
class PrefixList:
    id: str
    name: str
    cidrs: tuple[str, ...] = ()

    @cached_property
    def ranges(self) -> tuple[Range, ...]:
        return merge(cidr_range(c) for c in self.cidrs if is_ipv4_cidr(c))


@dataclass(frozen=True)
class PeeringConnection:
    id: str
    requester_vpc_id: str
    accepter_vpc_id: str
    status: str

    @property
    def active(self) -> bool:
        return self.status == "active"


@dataclass(frozen=True)
class Topology:
    """The forwarding plane of some VPCs of one region."""

    region: str
    vpc_ids: tuple[str, ...] = ()
    subnets: dict[str, Subnet] = field(default_factory=dict)
    network_acls: dict[str, NetworkAcl] = field(default_factory=dict)
    route_tables: dict[str, RouteTable] = field(default_factory=dict)
    internet_gateways: dict[str, InternetGateway] = field(default_factory=dict)
    nat_gateways: dict[str, NatGateway] = field(default_factory=dict)
    vpc_endpoints: dict[str, VpcEndpoint] = field(default_factory=dict)
    prefix_lists: dict[str, PrefixList] = field(default_factory=dict)
    peering_connections: dict[str, PeeringConnection] = field(default_factory=dict)
    # Interfaces of interface endpoints, and their groups: destinations that are not cluster nodes.
    interfaces: dict[str, NetworkInterface] = field(default_factory=dict)
    security_groups: dict[str, SecurityGroup] = field(default_factory=dict)

    @cached_property
    def _nacl_by_subnet(self) -> dict[str, NetworkAcl]:
        return {s: acl for acl in self.network_acls.values() for s in acl.subnet_ids}

    @cached_property
    def _table_by_subnet(self) -> dict[str, RouteTable]:
        return {s: table for table in self.route_tables.values() for s in table.subnet_ids}

    @cached_property
    def _main_table(self) -> dict[str, RouteTable]:
        return {t.vpc_id: t for t in self.route_tables.values() if t.main}

    def covers(self, vpc_id: str | None) -> bool:
        return vpc_id in self.vpc_ids

    def nacl_for(self, subnet_id: str) -> NetworkAcl | None:
        return self._nacl_by_subnet.get(subnet_id)

    def route_table_for(self, subnet_id: str, vpc_id: str | None) -> tuple[RouteTable | None, bool]:
        """The subnet's table and whether it is explicit (else the VPC's main table applies)."""
        table = self._table_by_subnet.get(subnet_id)
        if table is not None:
            return table, True
        return self._main_table.get(vpc_id or ""), False

    def vpc_ranges(self, vpc_id: str) -> tuple[Range, ...]:
        """The VPC's IPv4 CIDRs, read from the local routes every table of the VPC carries."""
        return merge(
            cidr_range(r.destination)
            for t in self.route_tables.values()
            if t.vpc_id == vpc_id
            for r in t.routes
            if r.target_kind == LOCAL and is_ipv4_cidr(r.destination)
        )

    def s3_prefix_list(self, service: str = "s3") -> PrefixList | None:
        """The AWS-managed prefix list of S3 (or of S3 Express One Zone, service "s3express") in this region: what
        gateway endpoint routes point at."""
        wanted = f"com.amazonaws.{self.region}.{service}"
        return next((p for p in self.prefix_lists.values() if p.name == wanted), None)

    def s3_endpoints(self, vpc_id: str, service: str = "s3") -> list[VpcEndpoint]:
        suffix = f".{self.region}.{service}"
        return [e for e in self.vpc_endpoints.values() if e.vpc_id == vpc_id and e.service_name.endswith(suffix)]

    def igw_attached(self, igw_id: str, vpc_id: str) -> bool:
        igw = self.internet_gateways.get(igw_id)
        return igw is not None and vpc_id in igw.attached_vpc_ids

    def prefix_list_ranges(self, prefix_list_id: str) -> tuple[Range, ...] | None:
        """The prefix list's CIDRs, or ``None`` when they were not fetched (so a verdict would be a guess)."""
        found = self.prefix_lists.get(prefix_list_id)
        return found.ranges if found is not None and found.cidrs else None
