"""Exact sets of flows: IPv4 address ranges x a "service" axis that encodes protocol and port.

Security groups, network ACLs and routes all decide on (peer address, protocol, port). Encoding the
protocol and port on one integer axis lets every rule become a rectangle, and "does this rule set admit
the whole flow?" becomes rectangle subtraction: what is left over is exactly the part that is dropped.
That is what makes a verdict for a CIDR (``203.0.113.0/24``) or a whole equivalence class of interfaces
as exact as for one address, and what lets evidence say which addresses and ports are missing.

The service axis: TCP ports at 0..65535, UDP ports at 65536..131071, then one point per IP protocol
number (ICMP = 1, ...). ICMP types and codes are not distinguished. IPv4 only.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Range = tuple[int, int]  # inclusive

MAX_ADDRESS = 2**32 - 1
TCP_BASE = 0
UDP_BASE = 65536
PROTOCOL_BASE = 131072
SERVICE_MAX = PROTOCOL_BASE + 255
ALL_SERVICES: Range = (0, SERVICE_MAX)
ALL_ADDRESSES: Range = (0, MAX_ADDRESS)

PROTOCOL_NAMES = {"6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6", "-1": "-1", "all": "-1"}
PROTOCOL_NUMBERS = {"tcp": "6", "udp": "17", "icmp": "1", "-1": "-1"}


def protocol_name(protocol: str | int) -> str:
    """'6' -> 'tcp', 'all' -> '-1'; names and other numbers pass through."""
    text = str(protocol).lower()
    return PROTOCOL_NAMES.get(text, text)


def cidr_range(cidr: str) -> Range:
    network = ipaddress.IPv4Network(cidr, strict=False)
    return int(network.network_address), int(network.broadcast_address)


def address_range(ip: str) -> Range:
    # inet_pton is strict like ipaddress and ~10x faster: classes of thousands of interfaces parse every IP.
    try:
        value = int.from_bytes(socket.inet_pton(socket.AF_INET, ip), "big")
    except OSError:
        raise ValueError(f"{ip!r} is not an IPv4 address") from None
    return value, value


def is_ipv4_cidr(value: str | None) -> bool:
    if not value:
        return False
    try:
        ipaddress.IPv4Network(value, strict=False)
    except ValueError:
        return False
    return True


def service_ranges(protocol: str, ports: Sequence[Range] | None = None) -> tuple[Range, ...]:
    """The service-axis ranges of a protocol and optional port ranges (``None``: every port)."""
    name = protocol_name(protocol)
    if name == "-1":
        return (ALL_SERVICES,)
    if name in ("tcp", "udp"):
        base = TCP_BASE if name == "tcp" else UDP_BASE
        spans = ports or [(0, 65535)]
        return tuple((base + max(0, lo), base + min(65535, hi)) for lo, hi in spans)
    number = int(PROTOCOL_NUMBERS.get(name, name))
    return ((PROTOCOL_BASE + number, PROTOCOL_BASE + number),)


def rule_services(protocol: str, from_port: int | None, to_port: int | None) -> tuple[Range, ...]:
    """Services a SG or NACL rule covers; -1/None ports mean every port of the protocol."""
    name = protocol_name(protocol)
    if name in ("tcp", "udp") and from_port is not None and from_port >= 0:
        return service_ranges(name, [(from_port, to_port if to_port is not None and to_port >= 0 else from_port)])
    return service_ranges(name)


def merge(ranges: Iterable[Range]) -> tuple[Range, ...]:
    """Sorted, disjoint, adjacent ranges joined."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def ranges_overlap(a: Sequence[Range], b: Sequence[Range]) -> bool:
    return any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a for lo2, hi2 in b)


def range_contains(outer: Range, inner: Range) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


@dataclass(frozen=True)
class Box:
    """Addresses [a_lo, a_hi] x services [s_lo, s_hi]."""

    a_lo: int
    a_hi: int
    s_lo: int
    s_hi: int

    def intersect(self, other: Box) -> Box | None:
        a_lo, a_hi = max(self.a_lo, other.a_lo), min(self.a_hi, other.a_hi)
        s_lo, s_hi = max(self.s_lo, other.s_lo), min(self.s_hi, other.s_hi)
        return Box(a_lo, a_hi, s_lo, s_hi) if a_lo <= a_hi and s_lo <= s_hi else None

    def minus(self, other: Box) -> list[Box]:
        cut = self.intersect(other)
        if cut is None:
            return [self]
        pieces = []
        if self.a_lo < cut.a_lo:
            pieces.append(Box(self.a_lo, cut.a_lo - 1, self.s_lo, self.s_hi))
        if cut.a_hi < self.a_hi:
            pieces.append(Box(cut.a_hi + 1, self.a_hi, self.s_lo, self.s_hi))
        if self.s_lo < cut.s_lo:
            pieces.append(Box(cut.a_lo, cut.a_hi, self.s_lo, cut.s_lo - 1))
        if cut.s_hi < self.s_hi:
            pieces.append(Box(cut.a_lo, cut.a_hi, cut.s_hi + 1, self.s_hi))
        return pieces


def boxes(addresses: Iterable[Range], services: Iterable[Range]) -> list[Box]:
    services = list(services)
    return [Box(a_lo, a_hi, s_lo, s_hi) for a_lo, a_hi in addresses for s_lo, s_hi in services]


@dataclass(frozen=True)
class FlowSet:
    """A union of boxes: the flows still undecided, admitted or dropped at some hop."""

    parts: tuple[Box, ...] = ()

    @classmethod
    def of(cls, addresses: Iterable[Range], services: Iterable[Range]) -> FlowSet:
        return cls(tuple(boxes(addresses, services)))

    @property
    def empty(self) -> bool:
        return not self.parts

    def minus(self, cut: Iterable[Box]) -> FlowSet:
        remaining = list(self.parts)
        for box in cut:
            remaining = [piece for part in remaining for piece in part.minus(box)]
            if not remaining:
                break
        return FlowSet(tuple(remaining))

    def intersect(self, cut: Iterable[Box]) -> FlowSet:
        cut = list(cut)
        return FlowSet(tuple(x for part in self.parts for box in cut if (x := part.intersect(box)) is not None))

    def addresses(self) -> tuple[Range, ...]:
        return merge((b.a_lo, b.a_hi) for b in self.parts)

    def services(self) -> tuple[Range, ...]:
        return merge((b.s_lo, b.s_hi) for b in self.parts)


def cidrs_of(ranges: Iterable[Range], limit: int = 8) -> list[str]:
    """Address ranges as the fewest CIDRs (at most ``limit``, then '... (+N more)')."""
    out: list[str] = []
    for lo, hi in merge(ranges):
        out.extend(
            str(n) for n in ipaddress.summarize_address_range(ipaddress.IPv4Address(lo), ipaddress.IPv4Address(hi))
        )
    if len(out) > limit:
        return out[:limit] + [f"... (+{len(out) - limit} more)"]
    return out


def split_services(ranges: Iterable[Range]) -> list[tuple[str, int | None, int | None]]:
    """Service-axis ranges back to (protocol, from_port, to_port); the whole axis is ('-1', None, None)."""
    merged = merge(ranges)
    # More than one non-TCP/UDP protocol (e.g. "all traffic" minus a port) is only expressible as protocol -1.
    if sum(max(0, min(hi, SERVICE_MAX) - max(lo, PROTOCOL_BASE) + 1) for lo, hi in merged) > 1:
        return [("-1", None, None)]
    out: list[tuple[str, int | None, int | None]] = []
    for lo, hi in merged:
        for name, base in (("tcp", TCP_BASE), ("udp", UDP_BASE)):
            top = base + 65535
            if lo <= top and hi >= base:
                out.append((name, max(lo, base) - base, min(hi, top) - base))
        for number in range(max(lo, PROTOCOL_BASE), hi + 1):
            proto = str(number - PROTOCOL_BASE)
            out.append((PROTOCOL_NAMES.get(proto, proto), None, None))
    return out


def describe_services(ranges: Iterable[Range]) -> str:
    """'tcp/22', 'tcp/1018-1023', 'all traffic', 'icmp' for evidence and summaries."""
    parts = []
    for name, lo, hi in split_services(ranges):
        if name == "-1":
            parts.append("all traffic")
        elif lo is None or (lo, hi) == (0, 65535):
            parts.append(f"{name} (all ports)" if name in ("tcp", "udp") else name)
        else:
            parts.append(f"{name}/{lo}" if lo == hi else f"{name}/{lo}-{hi}")
    return ", ".join(parts)
