"""Replies through stateless network ACLs: which clients' ports the reply goes back to, and who gets it.

The VPC guide (docs.aws.amazon.com/vpc/latest/userguide/nacl-ephemeral-ports.html): "The client that initiates
the request chooses the ephemeral port range. The range varies depending on the client's operating system."
It lists Linux kernels (32768-61000; the kernel's own default, net.ipv4.ip_local_port_range, is 32768-60999,
used here), Windows Server 2008 and later (49152-65535, as macOS), NAT gateways, Elastic Load Balancing and
Lambda (1024-65535), and recommends: "to cover the different types of clients that might initiate traffic to
public-facing instances in your VPC, you can open ephemeral ports 1024-65535". Lustre is different: LNet
connects from its reserved ports, so replies to Lustre clients and servers go to 1018-1023, the range the FSx
for Lustre guide opens (docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html).

A reply rule is judged per kind of client: every kind admitted passes; some kinds (or some of a kind's
ports) admitted is a warning naming who would fail; none admitted at all blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fmdoctor.net.model import ClientPorts
from fmdoctor.net.nacl import NaclVerdict, evaluate_nacl
from fmdoctor.net.space import FlowSet, Range, boxes, service_ranges
from fmdoctor.net.topology import NetworkAcl

LINUX = ClientPorts("Linux clients (32768-60999)", (32768, 60999))
WINDOWS = ClientPorts("Windows Server 2008+ and macOS clients (49152-65535)", (49152, 65535))
NAT_GATEWAY = ClientPorts("clients behind a NAT gateway or load balancer, and Lambda (1024-65535)", (1024, 65535))
LUSTRE = ClientPorts("Lustre clients and servers (LNet's ports 1018-1023)", (1018, 1023))
COMMON_CLIENTS = (LINUX, WINDOWS, NAT_GATEWAY)  # who may be on the other end of a connection from outside
RECOMMENDED: Range = (1024, 65535)  # what AWS suggests an ACL opens for replies


@dataclass(frozen=True)
class ReplyJudgement:
    """How an ACL treats replies to ``clients`` going to some peer addresses."""

    verdict: NaclVerdict  # over every client's ports at once: its rules are the evidence
    blocked_addresses: tuple[Range, ...]  # peer addresses no client gets any reply on
    failing: tuple[tuple[ClientPorts, tuple[Range, ...]], ...]  # clients with ports dropped, and those ports
    admitted: tuple[ClientPorts, ...]  # clients all of whose ports pass

    @property
    def dropped_ports(self) -> tuple[Range, ...]:
        return tuple(sorted({span for _, spans in self.failing for span in spans}))


def judge(acl: NetworkAcl, egress: bool, peer: Sequence[Range], protocol: str,
          clients: Sequence[ClientPorts]) -> ReplyJudgement:
    union = evaluate_nacl(acl, egress, FlowSet.of(peer, _services(protocol, clients)))
    admitted_addresses: list[Range] = []
    failing: list[tuple[ClientPorts, tuple[Range, ...]]] = []
    admitted: list[ClientPorts] = []
    for client in clients:
        wanted = FlowSet.of(peer, _services(protocol, [client]))
        verdict = evaluate_nacl(acl, egress, wanted)
        if verdict.allowed:
            admitted.append(client)
            admitted_addresses.extend(peer)
            continue
        passed = wanted.minus(verdict.denied.parts)
        admitted_addresses.extend(passed.addresses())
        failing.append((client, _ports(protocol, verdict.denied.services())))
    nowhere = FlowSet.of(peer, [(0, 0)]).minus(boxes(admitted_addresses, [(0, 0)])).addresses()
    return ReplyJudgement(union, nowhere, tuple(failing), tuple(admitted))


def _services(protocol: str, clients: Sequence[ClientPorts]) -> tuple[Range, ...]:
    return service_ranges(protocol, [c.ports for c in clients])


def _ports(protocol: str, services: Sequence[Range]) -> tuple[Range, ...]:
    base = service_ranges(protocol, [(0, 0)])[0][0]
    return tuple((lo - base, hi - base) for lo, hi in services)


def describe_ports(spans: Sequence[Range]) -> str:
    return ", ".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in spans)


def fix_range(clients: Sequence[ClientPorts]) -> Range:
    """The reply range a fix opens: Lustre's own ports for Lustre, else AWS's recommended 1024-65535."""
    return LUSTRE.ports if tuple(clients) == (LUSTRE,) else RECOMMENDED
