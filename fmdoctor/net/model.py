"""What a reachability question is about and what its answer says: endpoints, flows, hops, the blocker.

The explanation codes are public and stable (JSON, findings, runbooks, the agent): add, never rename.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.net.space import Range, cidrs_of, describe_services, merge, service_ranges

SG_EGRESS = "sg-egress-no-match"
SG_INGRESS = "sg-ingress-no-match"
NACL_DENY = "nacl-deny"
NO_ROUTE = "no-route"
BLACKHOLE = "blackhole-route"
NO_PUBLIC_IP = "no-public-ip"
NAT_NO_INBOUND = "nat-no-inbound"
NO_INTERNET_GATEWAY = "no-internet-gateway"
NACL_REPLY_PORTS = "nacl-reply-ports"  # a warning, never a blocker: replies reach some clients' ports only
EFA_CROSS_SUBNET = "efa-cross-subnet"  # the name predates the rule: only a cross-AZ or cross-VPC pair blocks

CODES = {
    SG_EGRESS: "the source's security groups have no outbound rule for this traffic",
    SG_INGRESS: "the destination's security groups have no inbound rule for this traffic",
    NACL_DENY: "a network ACL rule (or its final '*' deny) drops the traffic or its reply",
    NO_ROUTE: "a route table has no route to the destination (or for the reply)",
    BLACKHOLE: "the matching route points at a target that no longer exists or is not available",
    NO_PUBLIC_IP: "an internet path needs a public or Elastic IP on the interface, and it has none",
    NAT_NO_INBOUND: "the destination reaches the internet through a NAT gateway, which admits no inbound connections",
    NO_INTERNET_GATEWAY: "the route names an internet gateway that is not attached to the VPC",
    NACL_REPLY_PORTS: "a network ACL admits replies to some clients' ephemeral ports but not to others'",
    EFA_CROSS_SUBNET: "an EFA flow between interfaces in different Availability Zones or VPCs, which EFA can't cross",
}

PASS = "pass"
BLOCK = "block"
UNVERIFIED = "unverified"


@dataclass(frozen=True)
class ClientPorts:
    """The source ports a kind of client picks, so the ports its replies come back to."""

    name: str
    ports: Range


@dataclass(frozen=True)
class Flow:
    """Protocol and destination ports of the initiating direction; ``efa`` for EFA's OS-bypass traffic;
    ``clients`` the source ports the initiator uses (None: judged from who the source is)."""

    protocol: str  # "tcp", "udp", "icmp", "-1"
    ports: tuple[Range, ...] | None = None
    efa: bool = False
    clients: tuple[ClientPorts, ...] | None = None

    def services(self) -> tuple[Range, ...]:
        return service_ranges(self.protocol, self.ports)

    @property
    def has_ports(self) -> bool:
        return self.protocol in ("tcp", "udp")

    def describe(self) -> str:
        return "EFA (all traffic, group-referencing rules)" if self.efa else describe_services(self.services())

    @property
    def port_label(self) -> int | str | None:
        if not self.ports:
            return None
        if len(self.ports) == 1 and self.ports[0][0] == self.ports[0][1]:
            return self.ports[0][0]
        return ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.ports)


@dataclass(frozen=True)
class Endpoint:
    """One end of a flow: an interface, a class of alike interfaces, a CIDR, the internet or S3."""

    kind: str  # "interface" | "class" | "cidr" | "internet" | "s3"
    label: str  # for people: 'head-node (i-0abc, eni-0def 10.0.128.10)'
    resource: str  # the id to cite: ENI, instance, CIDR, bucket, file system
    addresses: tuple[Range, ...] = ()
    vpc_id: str | None = None
    subnet_id: str | None = None
    group_ids: tuple[str, ...] = ()
    public_ip: str | None = None  # an address every member has (classes: any one, all members have one)
    interface_ids: tuple[str, ...] = ()
    instance_ids: tuple[str, ...] = ()
    prefix_list_ids: frozenset[str] = field(default_factory=frozenset)
    query: str = ""  # what the user typed
    bucket: str | None = None
    bucket_region: str | None = None
    service: str = "s3"  # for S3 ends: "s3", or "s3express" for an S3 Express One Zone directory bucket

    @property
    def internal(self) -> bool:
        return self.kind in ("interface", "class")

    def cidrs(self, limit: int = 8) -> list[str]:
        return cidrs_of(self.addresses, limit)

    def to_json_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"input": self.query or self.resource, "kind": self.kind, "resource": self.resource,
                                "label": self.label}
        if self.internal:
            data.update(subnet=self.subnet_id, security_groups=list(self.group_ids), addresses=self.cidrs())
            if self.public_ip:
                data["public_ip"] = self.public_ip
        elif self.kind == "s3":
            data.update(bucket=self.bucket, region=self.bucket_region, service=self.service)
        else:
            data["addresses"] = self.cidrs()
        return data

    def part_label(self, ranges: tuple[Range, ...]) -> str:
        """The part of this endpoint a route decides, in words: the label when it is all of it."""
        if merge(ranges) == merge(self.addresses):
            return self.label
        cidrs = cidrs_of(ranges, 10**6)
        if len(cidrs) > 3:
            return f"part of {self.label} ({len(cidrs)} CIDRs)"
        return f"{', '.join(cidrs)} ({self.label})"

    def with_addresses(self, addresses: tuple[Range, ...]) -> Endpoint:
        return dataclasses.replace(self, addresses=merge(addresses))


@dataclass(frozen=True)
class Hop:
    component: str  # eni, sg-egress, nacl-out, route, internet-gateway, nat-gateway, vpc-endpoint, ...
    resource: str
    verdict: str  # pass | block | unverified
    detail: str
    direction: str = "forward"  # or "return"
    rule: str | None = None
    path: str | None = None  # which way out, when a destination's parts leave by several (NAT, S3 endpoint)

    def to_json_dict(self) -> dict[str, Any]:
        return {"component": self.component, "resource": self.resource, "verdict": self.verdict,
                "direction": self.direction, "detail": self.detail, "rule": self.rule, "path": self.path}


@dataclass(frozen=True)
class Blocked:
    code: str
    component: str
    resource: str
    rule: str | None
    fix: list[dict[str, Any]]
    evidence: dict[str, Any]

    @property
    def summary(self) -> str:
        return str(self.evidence.get("summary", CODES.get(self.code, self.code)))

    def to_json_dict(self) -> dict[str, Any]:
        return {"code": self.code, "component": self.component, "resource": self.resource, "rule": self.rule,
                "fix": self.fix, "evidence": self.evidence}


@dataclass(frozen=True)
class Caveat:
    """Something that lets the flow through for some clients only (``code`` is an explanation code)."""

    code: str
    component: str
    resource: str
    summary: str
    remedy: str
    direction: str = "return"
    rule: str | None = None
    fix: tuple[dict[str, Any], ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        return {"code": self.code, "component": self.component, "resource": self.resource, "rule": self.rule,
                "fix": list(self.fix), "evidence": {"summary": self.summary, "remedy": self.remedy,
                                                     "direction": self.direction, **self.evidence}}


@dataclass(frozen=True)
class ReachabilityResult:
    """``reachable`` is None when nothing blocks but part of the path could not be evaluated."""

    reachable: bool | None
    source: Endpoint
    destination: Endpoint
    flow: Flow
    hops: tuple[Hop, ...]
    blocked_by: Blocked | None = None
    # Set when the blocker drops only some addresses of one end ("source" or "destination"): a class
    # evaluation then splits that end's members (not part of the JSON).
    partial: tuple[str, tuple[Range, ...]] | None = None
    warnings: tuple[Caveat, ...] = ()  # reachable, but not for every kind of client

    @property
    def unverified(self) -> list[Hop]:
        return [h for h in self.hops if h.verdict == UNVERIFIED]

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "reachable": self.reachable,
            "source": self.source.to_json_dict(),
            "destination": self.destination.to_json_dict(),
            "protocol": "efa" if self.flow.efa else "all" if self.flow.protocol == "-1" else self.flow.protocol,
            "port": self.flow.port_label,
            "hops": [h.to_json_dict() for h in self.hops],
            "blocked_by": self.blocked_by.to_json_dict() if self.blocked_by else None,
            "warnings": [w.to_json_dict() for w in self.warnings],
        }
