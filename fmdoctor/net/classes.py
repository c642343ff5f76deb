"""Equivalence classes of interfaces, and class-level (all-pairs) verdicts on a networkx graph.

Interfaces in one subnet with the same security groups are treated alike by every component the
evaluation reads, except CIDR rules narrower than the subnet. So a class is evaluated once with the
set of all its members' addresses; when a blocker drops only some of those addresses, that end is split
into the members it drops and the rest, and each part is evaluated again. Verdicts stay exact while an
all-pairs answer for 5,000 nodes costs about as much as for 50 (bench/reachability.py measures it).

EFA goes one step further (:func:`evaluate_efa_classes`): between classes in one zone and VPC its verdict
reads nothing but the two ends' security groups, so classes with the same groups form a block and one
evaluated pair per ordered pair of blocks decides every class pair in it; a pair's path (its hops) is
evaluated only when something reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from fmdoctor.engine.inventory import NetworkInterface
from fmdoctor.net.analyze import analyze_endpoints
from fmdoctor.net.model import Blocked, Endpoint, Flow, ReachabilityResult
from fmdoctor.net.network import ClassKey, Network, group_interfaces
from fmdoctor.net.space import address_range, ranges_overlap

# Where EFA can join a class: ("zone", VPC, zone), or ("subnet", id) where only the subnet is known.
EfaPlace = tuple[str, ...]

@dataclass(frozen=True)
class InterfaceClass:
    key: ClassKey
    endpoint: Endpoint
    members: tuple[NetworkInterface, ...]

    @cached_property
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


class PairOutcome:
    """The verdict for some members of a source class towards some members of a destination class.

    ``reachable`` and ``blocked_by`` are always known; ``result`` (the whole path, hop by hop) is either given
    or, for a verdict taken from an equivalent pair, evaluated when first read."""

    __slots__ = ("source", "destination", "reachable", "blocked_by", "_result", "_path")

    def __init__(self, source: InterfaceClass, destination: InterfaceClass, result: ReachabilityResult | None = None,
                 *, reachable: bool | None = None, blocked_by: Blocked | None = None,
                 path: tuple[Network, Flow] | None = None):
        self.source = source
        self.destination = destination
        self._result = result
        self._path = path
        if result is not None:
            reachable, blocked_by = result.reachable, result.blocked_by
        self.reachable = reachable
        self.blocked_by = blocked_by

    @property
    def result(self) -> ReachabilityResult:
        if self._result is None:
            assert self._path is not None, "an outcome needs its result or the network and flow to evaluate it"
            network, flow = self._path
            self._result = analyze_endpoints(network, self.source.endpoint, self.destination.endpoint, flow)
        return self._result

    def __repr__(self) -> str:
        return f"PairOutcome({self.source.key} -> {self.destination.key}: {self.reachable})"


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


def evaluate_efa_classes(network: Network, classes: Sequence[InterfaceClass], flow: Flow) -> EfaVerdicts:
    """Every ordered pair of classes EFA should join (fmdoctor.net.efa.needs_pair: one zone and VPC, two
    different nodes), with the verdicts :func:`evaluate_classes` would give them, by equivalence blocks.

    Inside one zone and VPC the EFA path (fmdoctor.net.analyze._efa) passes the zone hop, notes the route hop,
    and then reads only the security groups of each end and the peer's group ids, in order; an end's label
    enters a blocker only when it has no group at all, so such a class is a block of its own. One pair per
    ordered pair of blocks is evaluated, and decides every pair in it; a pair's own path is evaluated when it
    is read. tests/unit/test_efa_blocks.py holds this equal to per-pair evaluation on random worlds."""
    if not flow.efa:
        raise ValueError("equivalence blocks hold for EFA flows only")
    return EfaVerdicts(network, flow, tuple(classes))


class EfaVerdicts:
    """All-pairs EFA verdicts between classes, held per ordered pair of blocks (:func:`evaluate_efa_classes`)."""

    def __init__(self, network: Network, flow: Flow, classes: tuple[InterfaceClass, ...]):
        self.network, self.flow, self.classes = network, flow, classes
        self._places: dict[EfaPlace, list[InterfaceClass]] = {}
        self._place_of: dict[ClassKey, EfaPlace] = {}
        for cls in classes:
            place = _efa_place(network, cls)
            if place is not None:
                self._places.setdefault(place, []).append(cls)
                self._place_of[cls.key] = place
        blocks: dict[tuple[str, ...] | tuple[str, ClassKey], int] = {}
        self._block_of = {c.key: blocks.setdefault(c.endpoint.group_ids or ("", c.key), len(blocks)) for c in classes}
        self._decided: dict[tuple[int, int], PairOutcome] = {}  # (source block, destination block) -> its first pair

    def pairs(self) -> Iterator[tuple[InterfaceClass, InterfaceClass]]:
        """The ordered pairs EFA should join, in :func:`evaluate_classes`' order (source-major, as listed)."""
        for a in self.classes:
            place = self._place_of.get(a.key)
            if place is None:
                continue
            for b in self._places[place]:
                if a.key != b.key or len(a.instance_ids) >= 2:  # one node's own interfaces are no pair to judge
                    yield a, b

    def outcome(self, a: InterfaceClass, b: InterfaceClass) -> PairOutcome:
        """The pair's outcome: its block's verdict and blocker, its own path when read."""
        decided = self._decide(a, b)
        if decided.source is a and decided.destination is b:
            return decided
        return PairOutcome(a, b, reachable=decided.reachable, blocked_by=decided.blocked_by,
                           path=(self.network, self.flow))

    @property
    def evaluated(self) -> int:
        """Pairs evaluated so far: one per ordered pair of blocks read."""
        return len(self._decided)

    def reachable(self, a: InterfaceClass, b: InterfaceClass) -> bool | None:
        return self._decide(a, b).reachable

    def _decide(self, a: InterfaceClass, b: InterfaceClass) -> PairOutcome:
        key = (self._block_of[a.key], self._block_of[b.key])
        decided = self._decided.get(key)
        if decided is None:
            decided = PairOutcome(a, b, analyze_endpoints(self.network, a.endpoint, b.endpoint, self.flow))
            self._decided[key] = decided
        return decided

    def blocked_outcomes(self) -> list[PairOutcome]:
        """What :func:`blocked_outcomes` reads from :func:`evaluate_classes`' graph, in the same order."""
        return self._outcomes(False)

    def unverified_outcomes(self) -> list[PairOutcome]:
        return self._outcomes(None)

    def _outcomes(self, verdict: bool | None) -> list[PairOutcome]:
        block_of, decided = self._block_of, self._decided
        found = []
        for a, b in self.pairs():
            known = decided.get((block_of[a.key], block_of[b.key])) or self._decide(a, b)
            if known.reachable is verdict:
                found.append(self.outcome(a, b))
        return found

    def islands(self) -> list[list[ClassKey]]:
        """What :func:`islands` reads from :func:`evaluate_classes`' graph: two classes of a place whose blocks
        reach each other both ways are joined (two classes of one block too, a class alone has no pair)."""
        joined: list[tuple[ClassKey, ClassKey]] = []
        for members in self._places.values():
            by_block: dict[int, list[InterfaceClass]] = {}
            for cls in members:
                by_block.setdefault(self._block_of[cls.key], []).append(cls)
            for first, these in by_block.items():
                for second, those in by_block.items():
                    if first > second or (first == second and len(these) < 2):
                        continue
                    a, b = these[0], (those[1] if first == second else those[0])
                    if self.reachable(a, b) and self.reachable(b, a):
                        joined += [(a.key, cls.key) for cls in (*these, *those)]
        return _components((c.key for c in self.classes), joined)

    def graph(self) -> nx.DiGraph:
        """:func:`evaluate_classes`' graph of these pairs, every pair an edge (for callers that walk one)."""
        graph = nx.DiGraph()
        for cls in self.classes:
            graph.add_node(cls.key, cls=cls)
        for a, b in self.pairs():
            outcome = self.outcome(a, b)
            graph.add_edge(a.key, b.key, outcomes=[outcome], reachable=outcome.reachable)
        return graph


def _efa_place(network: Network, cls: InterfaceClass) -> EfaPlace | None:
    """Classes with the same place are in one zone and VPC for EFA (fmdoctor.net.efa.boundary is SAME between
    any two of them); None for a class EFA can join to nothing, not even its own other members."""
    subnet_id = cls.key[0]
    if not subnet_id:
        return None
    subnet = network.subnets.get(subnet_id)
    if subnet is None or not subnet.zone:
        return ("subnet", subnet_id)  # only the same subnet is known to be one zone
    return ("zone", subnet.vpc_id, subnet.zone)


def _components(nodes: Iterable[ClassKey], joined: Iterable[tuple[ClassKey, ClassKey]]) -> list[list[ClassKey]]:
    """The connected components of the classes under the joins, largest first (networkx's own traversal)."""
    graph: nx.Graph = nx.Graph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(joined)
    return sorted((sorted(c) for c in nx.connected_components(graph)), key=lambda c: (-len(c), c))


def _worst(verdicts: Iterable[bool | None]) -> bool | None:
    seen = list(verdicts)
    if False in seen:
        return False
    return None if None in seen else True


def blocked_outcomes(graph: nx.DiGraph) -> list[PairOutcome]:
    return [o for _, _, data in graph.edges(data=True) if data["reachable"] is not True
            for o in data["outcomes"] if o.reachable is False]


def unverified_outcomes(graph: nx.DiGraph) -> list[PairOutcome]:
    return [o for _, _, data in graph.edges(data=True) if data["reachable"] is not True
            for o in data["outcomes"] if o.reachable is None]


def islands(graph: nx.DiGraph) -> list[list[ClassKey]]:
    """Classes connected by two-way reachability, largest first: how the cluster splits when it does."""
    reachable = nx.subgraph_view(graph, filter_edge=lambda a, b: graph.edges[a, b]["reachable"] is True)
    return _components(graph.nodes, reachable.to_undirected(reciprocal=True).edges)
