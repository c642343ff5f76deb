"""Which CloudWatch series belong to which node, GPU or interface of the cluster.

The CloudWatch agent names the instance with an appended ``InstanceId`` dimension, or only with ``host``
(its hostname) when the configuration has no ``append_dimensions``; Container Insights adds ``NodeName``;
EFA counters carry the ``eniId``. :mod:`fmdoctor.metrics.identity` resolves those names. The same GPU can
also be published under several dimension sets at once (per GPU and aggregated per instance, or under an
old and a new configuration); :func:`select_series` keeps one set so nothing is counted twice.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from fmdoctor.engine.identity import NodeIdentities
from fmdoctor.engine.inventory import Instance, Inventory
from fmdoctor.metrics.cloudwatch import Series
from fmdoctor.metrics.identity import NodeIdentity, NodeIndex, Resolved

NAME_DIMENSIONS = ("NodeName",)  # Container Insights' Kubernetes node name, after the configured host dimension
# The resolvers alive, by their nodes' identities and dimensions (NodeResolver.shared); one goes with its last owner.
_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], NodeResolver] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def instance_identity(instance: Instance, inventory: Inventory | None = None,
                      hostname_tags: Sequence[str] = ()) -> NodeIdentity:
    """An EC2 instance's names: with the inventory, every name the identity resolver knows for it (every
    address of its interfaces, VPC CNI pod IPs being secondary ones; its DNS names; ``hostname_tags``' values);
    without, its IP, private DNS name and ``hostname_tags``' values."""
    if inventory is not None:
        names = NodeIdentities.of(inventory, hostname_tags).every_name(instance.id)
        return NodeIdentity(instance.id, (), tuple(n for n in names if n != instance.id.lower()))
    ips = [instance.private_ip] if instance.private_ip else []
    names = [instance.private_dns] if instance.private_dns else []
    names += [instance.tags[t] for t in hostname_tags if instance.tags.get(t)]
    return NodeIdentity(instance.id, tuple(dict.fromkeys(ips)), tuple(names))


class NodeResolver:
    """Maps a series to one of the cluster's nodes by its instance dimension, else by its host names."""

    def __init__(self, nodes: Iterable[Instance | NodeIdentity], instance_dimension: str, host_dimension: str,
                 name_dimensions: Sequence[str] = NAME_DIMENSIONS):
        identities = [n if isinstance(n, NodeIdentity) else instance_identity(n) for n in nodes]
        self.index = NodeIndex(identities)
        self.id_dimensions = [instance_dimension]
        self.name_dimensions = [host_dimension, *name_dimensions]
        # series -> its answer: a listing's series is asked about when it is listed, queued and planned
        self._classified: dict[Series, tuple[Resolved, str | None]] = {}
        # each distinct answer once (one per node, mostly): the memo's values are shared, not a tuple per series
        self._answers: dict[tuple[Resolved, str | None], tuple[Resolved, str | None]] = {}

    @classmethod
    def shared(cls, nodes: Iterable[Instance | NodeIdentity], instance_dimension: str, host_dimension: str,
               name_dimensions: Sequence[str] = NAME_DIMENSIONS) -> NodeResolver:
        """The resolver of these nodes and dimensions that is alive, or a new one: a run's shared listing
        (:func:`~fmdoctor.metrics.nodes.shared_lister`) and its snapshot resolve the same series of the same
        nodes, and each resolver holds a name table and a memo of every series (81,920 at 2,048 p4d nodes).
        Its answers depend on the identities and dimensions alone, so sharing it changes none of them."""
        identities = tuple(n if isinstance(n, NodeIdentity) else instance_identity(n) for n in nodes)
        key = (identities, instance_dimension, host_dimension, tuple(name_dimensions))
        with _SHARED_LOCK:
            found = _SHARED.get(key)
            if found is None:
                found = _SHARED[key] = cls(identities, instance_dimension, host_dimension, name_dimensions)
        return found

    def classify(self, series: Series) -> tuple[Resolved, str | None]:
        """The node (or another node's), and the identity to report when the series named nothing known."""
        found = self._classified.get(series)
        if found is None:
            found = self.index.resolve_labels(dict(series.dimensions), self.id_dimensions, self.name_dimensions)
            found = self._classified[series] = self._answers.setdefault(found, found)
        return found

    def instance_of(self, series: Series) -> str | None:
        return self.classify(series)[0].node


def device_key(series: Series, device_dimensions: Sequence[str]) -> str:
    """'3' for index=3; 'NeuronCore=1,NeuronDevice=0' when several device dimensions are present; '' for none."""
    dims: dict[str, str] = {}
    for name, value in series.dimensions:
        dims.setdefault(name, value)  # the first of a name, as Series.dim
    parts = [(name, dims[name]) for name in device_dimensions if name in dims]
    if len(parts) == 1:
        return str(parts[0][1])
    return ",".join(f"{name}={value}" for name, value in sorted(parts))


def select_series(series: Iterable[Series], device_dimensions: Sequence[str]) -> dict[str, list[Series]]:
    """One dimension set's series of one node, by device.

    Prefers the set that tells devices apart (per GPU), then the one naming the most devices, then the one
    with the fewest dimensions. Series of that set naming the same device (e.g. after a hostname change) are
    kept together, so their datapoints merge into one device.
    """
    groups: dict[frozenset[str], list[Series]] = {}
    keys: dict[Series, str] = {}  # each series' device, worked out once for the ranking and the grouping
    for s in series:
        groups.setdefault(s.dimension_names, []).append(s)
        keys[s] = device_key(s, device_dimensions)
    if not groups:
        return {}
    wanted = set(device_dimensions)

    def rank(item: tuple[frozenset[str], list[Series]]) -> tuple[bool, int, int, tuple[str, ...]]:
        names, members = item
        devices = {keys[s] for s in members}
        return (bool(names & wanted), len(devices), -len(names), tuple(sorted(names)))

    _, best = max(groups.items(), key=rank) if len(groups) > 1 else next(iter(groups.items()))
    by_device: dict[str, list[Series]] = {}
    for s in sorted(best, key=lambda s: s.dimensions):
        by_device.setdefault(keys[s], []).append(s)
    return by_device


def missing_devices(present: Iterable[str], expected: int) -> list[str]:
    """Device numbers 0..expected-1 absent from ``present`` when devices are numbered (index, NeuronCore)."""
    present = set(present)
    if not present or not all(p.isdigit() for p in present):
        return []
    return [str(i) for i in range(expected) if str(i) not in present]
