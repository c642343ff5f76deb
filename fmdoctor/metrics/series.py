"""Which CloudWatch series belong to which node, GPU or interface of the cluster.

The CloudWatch agent names the instance with an appended ``InstanceId`` dimension, or only with ``host``
(its hostname, ``ip-10-0-1-23.us-west-2.compute.internal`` or ``i-0abc....compute.internal``) when the
configuration has no ``append_dimensions``; EFA counters carry the ``eniId``. The same GPU can also be
published under several dimension sets at once (per GPU and aggregated per instance, or under an old and a
new configuration); :func:`select_series` keeps one set so nothing is counted twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from fmdoctor.engine.inventory import Instance
from fmdoctor.metrics.cloudwatch import Series

_HOSTNAME = re.compile(r"^(?:ip-(\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3})|(i-[0-9a-f]{8,17}))(?:\.|$)")


class NodeResolver:
    """Maps a series to one of the cluster's instances by its instance dimension, else by its hostname."""

    def __init__(self, nodes: Iterable[Instance], instance_dimension: str, host_dimension: str):
        nodes = list(nodes)
        self.ids = {n.id for n in nodes}
        self.by_ip = {n.private_ip: n.id for n in nodes if n.private_ip}
        self.instance_dimension = instance_dimension
        self.host_dimension = host_dimension

    def instance_of(self, series: Series) -> str | None:
        instance_id = series.dim(self.instance_dimension)
        if instance_id is not None:
            return instance_id if instance_id in self.ids else None
        host = series.dim(self.host_dimension)
        match = _HOSTNAME.match(host or "")
        if not match:
            return None
        if match.group(2):
            return match.group(2) if match.group(2) in self.ids else None
        return self.by_ip.get(match.group(1).replace("-", "."))


def device_key(series: Series, device_dimensions: Sequence[str]) -> str:
    """'3' for index=3; 'NeuronCore=1,NeuronDevice=0' when several device dimensions are present; '' for none."""
    parts = [(name, series.dim(name)) for name in device_dimensions if series.dim(name) is not None]
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
    for s in series:
        groups.setdefault(s.dimension_names, []).append(s)
    if not groups:
        return {}
    wanted = set(device_dimensions)

    def rank(item: tuple[frozenset[str], list[Series]]) -> tuple[bool, int, int, tuple[str, ...]]:
        names, members = item
        devices = {device_key(s, device_dimensions) for s in members}
        return (bool(names & wanted), len(devices), -len(names), tuple(sorted(names)))

    _, best = max(groups.items(), key=rank)
    by_device: dict[str, list[Series]] = {}
    for s in sorted(best, key=lambda s: s.dimensions):
        by_device.setdefault(device_key(s, device_dimensions), []).append(s)
    return by_device


def missing_devices(present: Iterable[str], expected: int) -> list[str]:
    """Device numbers 0..expected-1 absent from ``present`` when devices are numbered (index, NeuronCore)."""
    present = set(present)
    if not present or not all(p.isdigit() for p in present):
        return []
    return [str(i) for i in range(expected) if str(i) not in present]
