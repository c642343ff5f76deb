"""The reachability front door: ``analyze`` over a loaded network, ``why_not`` for a cluster, and the
network loader the checks share.

``why_not(doctor, cluster, source, destination, port, protocol)`` is the contract the CLI
(``fmdoctor why-not``), the agent, the TUI, Slack and MCP call: it reads the cluster's inventory and the
topology of every VPC involved, resolves both ends, and returns a :class:`ReachabilityResult` whose
``to_json_dict()`` is ``{reachable, source, destination, protocol, port, hops[], blocked_by}``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.errors import AwsUnavailable, UsageError, credentials_error, describe_aws_failure
from fmdoctor.engine.inventory import INSTANCES
from fmdoctor.net.analyze import analyze_endpoints
from fmdoctor.net.fetch import fetch_topology
from fmdoctor.net.model import Endpoint, Flow, ReachabilityResult
from fmdoctor.net.network import Network
from fmdoctor.net.resolve import Resolved, Resolver, merge_topologies
from fmdoctor.net.space import Range

if TYPE_CHECKING:
    from fmdoctor.engine.api import Doctor
    from fmdoctor.engine.context import CheckContext
    from fmdoctor.engine.inventory import Inventory

PROTOCOLS = ("tcp", "udp", "icmp", "all", "efa")
_PORTS = re.compile(r"^\d{1,5}(-\d{1,5})?$")

__all__ = ["PROTOCOLS", "ReachabilityResult", "analyze", "load_network", "parse_flow", "why_not"]


def parse_ports(port: int | str | Sequence[int] | None) -> tuple[Range, ...] | None:
    """22, '22', '1018-1023', '988,1018-1023' -> port ranges; None stays None."""
    if port is None or port == "":
        return None
    if isinstance(port, bool):
        raise UsageError(f"invalid port {port!r}")
    if isinstance(port, int):
        items = [str(port)]
    elif isinstance(port, str):
        items = [p.strip() for p in port.split(",") if p.strip()]
    else:
        items = [str(p) for p in port]
    ranges = []
    for item in items:
        if not _PORTS.match(item):
            raise UsageError(f"invalid port {item!r}: use a number (22), a range (1018-1023) or a list (988,1018-1023)")
        low, _, high = item.partition("-")
        lo, hi = int(low), int(high or low)
        if not 0 <= lo <= hi <= 65535:
            raise UsageError(f"invalid port range {item!r}: ports are 0-65535, low to high")
        ranges.append((lo, hi))
    return tuple(sorted(ranges))


def parse_flow(protocol: str = "tcp", port: Any = None, default_ports: tuple[Range, ...] | None = None) -> Flow:
    name = (protocol or "tcp").strip().lower()
    if name in ("-1", "any"):
        name = "all"
    if name not in PROTOCOLS:
        raise UsageError(f"unknown protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
    ports = parse_ports(port)
    if name == "efa":
        if ports is not None:
            raise UsageError("--port does not apply to protocol efa (EFA needs all traffic)")
        return Flow("-1", efa=True)
    if name in ("icmp", "all"):
        if ports is not None:
            raise UsageError(f"--port does not apply to protocol {name}")
        return Flow("-1" if name == "all" else "icmp")
    ports = ports or default_ports
    if ports is None:
        raise UsageError(f"a port is needed for {name} (e.g. --port 22)")
    return Flow(name, ports)


def analyze(network: Network, source: str | Endpoint | Sequence[Endpoint], destination: str | Endpoint |
            Sequence[Endpoint], protocol: str = "tcp", port: Any = None, resolver: Resolver | None = None
            ) -> ReachabilityResult:
    """Evaluate ``source`` -> ``destination`` over a loaded network (no AWS calls unless ``resolver`` has them).

    Ends are strings (resolved against the network) or endpoints; an end with several classes (an FSx
    file system's interfaces) is blocked if any class is. Without a port, FSx for Lustre implies TCP 988
    and 1018-1023 (and replies to LNet's ports 1018-1023) and S3 implies 443. Protocol ``efa`` asks for EFA's
    OS-bypass traffic between two EFA interfaces (an instance stands for its first EFA interface): all-traffic
    group-referencing rules, one Availability Zone and VPC.
    """
    resolver = resolver or Resolver(network, _empty_inventory(network))
    sources = _ends(resolver, source)
    destinations = _ends(resolver, destination)
    flow = parse_flow(protocol, port, destinations.default_ports)
    if flow.protocol == "tcp" and (destinations.clients or sources.clients):  # Lustre replies go to LNet's ports
        flow = dataclasses.replace(flow, clients=destinations.clients or sources.clients)
    if any(e.kind == "s3" for e in destinations.endpoints) and not set(flow.ports or ()) <= {(80, 80), (443, 443)}:
        raise UsageError("S3 answers only on tcp/443 (HTTPS) and tcp/80: leave --port out for S3, or give 443")
    if flow.efa:
        sources = Resolved([efa_endpoint(resolver.network, e) for e in sources.endpoints])
        destinations = Resolved([efa_endpoint(resolver.network, e) for e in destinations.endpoints])
    results = [analyze_endpoints(resolver.network, s, d, flow)
               for s in sources.endpoints for d in destinations.endpoints]
    return next((r for r in results if r.reachable is False), None) or \
        next((r for r in results if r.reachable is None), results[0])


def why_not(doctor: Doctor, cluster: str | None, source: str, destination: str, port: Any = None,
            protocol: str = "tcp") -> ReachabilityResult:
    """Why can (or can't) ``source`` reach ``destination`` on ``protocol``/``port`` in ``cluster``'s network?

    Raises UsageError / TargetNotFound for bad input, CredentialsError / AwsUnavailable when AWS cannot
    be read; never a botocore exception.
    """
    parse_flow(protocol, port, default_ports=((0, 0),))  # reject bad protocol/port before any AWS call
    name = doctor.resolve_cluster(cluster)
    aws = doctor.connect(doctor.cluster_settings(name))
    # The instances, their interfaces and groups: never the SageMaker endpoints or HyperPod, which no flow names.
    inventory = doctor.inventory(name, aws, parts={INSTANCES})
    try:
        ec2 = aws.client("ec2")
        vpcs = sorted(inventory.vpc_ids())
        topology = fetch_topology(ec2, aws.region, vpcs, inventory.security_groups.values(),
                                  inventory.subnets_for(vpcs))
        clients = {"ec2": ec2, "fsx": aws.client("fsx"), "s3": aws.client("s3")}
        resolver = Resolver(Network.build(inventory, topology), inventory, clients)
        return analyze(resolver.network, source, destination, protocol, port, resolver)
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        if failure.kind == "credentials":
            raise credentials_error(failure) from None
        needs = f" (needs {failure.iam_action})" if failure.iam_action else ""
        raise AwsUnavailable(f"could not read the network configuration: {failure.code}{needs}: "
                             f"{failure.message}") from None


def load_network(ctx: CheckContext, extra_vpcs: Iterable[str | None] = ()) -> Network:
    """The cluster's network for checks: topology fetched once per run and shared by every check, plus
    that of other VPCs a check's destinations live in (a file system in a shared-services VPC)."""
    inventory = ctx.inventory

    def load() -> Network:
        vpcs = sorted(inventory.vpc_ids())
        topology = fetch_topology(ctx.client("ec2"), ctx.region, vpcs, inventory.security_groups.values(),
                                  inventory.subnets_for(vpcs))
        return Network.build(inventory, topology)

    network = ctx.shared("net.network", load)
    others = sorted({v for v in extra_vpcs if v} - set(network.topology.vpc_ids))
    if others:
        extra = ctx.shared(f"net.topology:{','.join(others)}", lambda: fetch_topology(
            ctx.client("ec2"), ctx.region, others, network.security_groups.values()))
        network = network.with_extras(extra.interfaces.values(), extra.security_groups,
                                      topology=merge_topologies(network.topology, extra))
    return network


def efa_endpoint(network: Network, end: Endpoint) -> Endpoint:
    """The EFA interface an end stands for: itself, or the first EFA interface of the instance it belongs to."""
    eni = network.interfaces.get(end.resource) if end.kind == "interface" else None
    if eni is None:
        raise UsageError(f"EFA flows are between EFA interfaces: {end.label} is not an instance or interface",
                         hint="name two instances or ENIs of the cluster (--from gpu-node-1 --to gpu-node-2)")
    if eni.is_efa:
        return end
    found = sorted((e for e in network.interfaces.values() if e.is_efa and eni.instance_id
                    and e.instance_id == eni.instance_id),
                   key=lambda e: (e.network_card_index or 0, e.device_index or 0, e.id))
    if not found:
        raise UsageError(f"{end.label} has no EFA interface", hint="EFA flows are between EFA interfaces")
    return network.interface_endpoint(found[0], end.query)


def _ends(resolver: Resolver, end: str | Endpoint | Sequence[Endpoint]) -> Resolved:
    if isinstance(end, str):
        return resolver.resolve(end)
    if isinstance(end, Endpoint):
        return Resolved([end])
    return Resolved(list(end))


def _empty_inventory(network: Network) -> Inventory:
    from fmdoctor.engine.inventory import Inventory

    return Inventory(cluster="", region=network.topology.region, instances=tuple(network.instances.values()),
                     interfaces=network.interfaces, security_groups=network.security_groups, subnets=network.subnets)
