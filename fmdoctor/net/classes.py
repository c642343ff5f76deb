"""Equivalence classes of interfaces, and class-level (all-pairs) verdicts on a networkx graph.

Interfaces in one subnet with the same security groups are treated alike by every component the
evaluation reads, except CIDR rules narrower than the subnet. So a class is evaluated once with the
set of all its members' addresses; when a blocker drops only some of those addresses, that end is split
into the members it drops and the rest, and each part is evaluated again. Verdicts stay exact while an
all-pairs answer for 5,000 nodes costs about as much as for 50 (bench/reachability.py measures it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from fmdoctor.engine.inventory import NetworkInterface
from fmdoctor.net.analyze import analyze_endpoints
from fmdoctor.net.model import Endpoint, Flow, ReachabilityResult
from fmdoctor.net.network import ClassKey, Network, group_interfaces
from fmdoctor.net.space import address_range, ranges_overlap


@dataclass(frozen=True)
class InterfaceClass:
    key: ClassKey
    endpoint: Endpoint
    members: tuple[NetworkInterface, ...]

    @property
    def instance_ids(self) -> list[str]:
        return sorted({m.instance_id for m in self.members if m.instance_id})

    @property
    def size(self) -> int:
        return len(self.members)


def class_of(network: Network, members: Sequence[NetworkInterface], key: ClassKey, what: str = "interface"
             ) -> InterfaceClass:
    if len(members) == 1:
        return InterfaceClass(key, network.interface_endpoint(members[0]), tuple(members))
    nodes = len({m.instance_id or m.id for m in members})
    groups = ", ".join(key[1]) or "no security group"
    label = f"{len(members)} {what}s of {nodes} nodes in {key[0]} ({groups})"
    return InterfaceClass(key, network.class_endpoint(members, label, key[0]), tuple(members))


def interface_classes(network: Network, interfaces: Iterable[NetworkInterface], *, by_public_ip: bool = True,
                      what: str = "interface") -> list[InterfaceClass]:
    """Group interfaces by (subnet, security-group set[, has a public IP]), in a stable order."""
    return [class_of(network, members, key, what)
            for key, members in group_interfaces(interfaces, by_public_ip).items()]


@dataclass(frozen=True)
class PairOutcome:
    """The verdict for some members of a source class towards some members of a destination class."""

    source: InterfaceClass
    destination: InterfaceClass
    result: ReachabilityResult


def evaluate_pair(network: Network, source: InterfaceClass, destination: InterfaceClass, flow: Flow
                  ) -> list[PairOutcome]:
    result = analyze_endpoints(network, source.endpoint, destination.endpoint, flow)
    if result.partial is None:
        return [PairOutcome(source, destination, result)]
    side, dropped = result.partial
    split = source if side == "source" else destination
    hit = [m for m in split.members if ranges_overlap([address_range(ip) for ip in m.private_ips], dropped)]
    rest = [m for m in split.members if m not in hit]
    if not hit or not rest:
        return [PairOutcome(source, destination, result)]
    outcomes = []
    for part in (hit, rest):
        sub = class_of(network, part, split.key)
        pair = (sub, destination) if side == "source" else (source, sub)
        outcomes.extend(evaluate_pair(network, *pair, flow))
    return outcomes


def evaluate_towards(network: Network, source: InterfaceClass, destination: Endpoint, flow: Flow
                     ) -> list[PairOutcome]:
    """A class towards a single endpoint (a CIDR, the internet, S3): splits the class where needed."""
    return evaluate_pair(network, source, InterfaceClass(("external", (), False), destination, ()), flow)


def evaluate_classes(
    network: Network,
    sources: Sequence[InterfaceClass],
    destinations: Sequence[InterfaceClass],
    flow: Flow,
    skip: Callable[[InterfaceClass, InterfaceClass], bool] | None = None,
) -> nx.DiGraph:
    """A graph whose nodes are class keys and whose edges carry the outcomes from one class to another."""
    graph = nx.DiGraph()
    for cls in (*sources, *destinations):
        graph.add_node(cls.key, cls=cls)
    for a in sources:
        for b in destinations:
            if skip is not None and skip(a, b):
                continue
            outcomes = evaluate_pair(network, a, b, flow)
            graph.add_edge(a.key, b.key, outcomes=outcomes,
                           reachable=_worst(o.result.reachable for o in outcomes))
    return graph


def _worst(verdicts: Iterable[bool | None]) -> bool | None:
    seen = list(verdicts)
    if False in seen:
        return False
    return None if None in seen else True


def blocked_outcomes(graph: nx.DiGraph) -> list[PairOutcome]:
    return [o for _, _, data in graph.edges(data=True) for o in data["outcomes"] if o.result.reachable is False]


def unverified_outcomes(graph: nx.DiGraph) -> list[PairOutcome]:
    return [o for _, _, data in graph.edges(data=True) for o in data["outcomes"] if o.result.reachable is None]


def islands(graph: nx.DiGraph) -> list[list[ClassKey]]:
    """Classes connected by two-way reachability, largest first: how the cluster splits when it does."""
    mutual = nx.Graph()
    mutual.add_nodes_from(graph.nodes)
    for a, b, data in graph.edges(data=True):
        back = graph.get_edge_data(b, a)
        if data["reachable"] and back is not None and back["reachable"]:
            mutual.add_edge(a, b)
    return sorted((sorted(c) for c in nx.connected_components(mutual)), key=lambda c: (-len(c), c))
