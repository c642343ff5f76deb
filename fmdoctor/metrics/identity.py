"""Which node a metric's labels name, by every name the agents publish for a node.

A node is named differently by each publisher, and a series may carry several of these:

* the CloudWatch agent: ``InstanceId`` only where ``append_dimensions`` adds it; always ``host``, the OS
  hostname: ``ip-10-0-1-23.us-west-2.compute.internal``, ``i-0abc....compute.internal`` (resource-based naming),
  or whatever the cluster sets (ParallelCluster's Slurm node names, ``queue1-st-p5-1``);
* Container Insights: ``InstanceId`` and ``NodeName`` (the Kubernetes node name: the private DNS name on EKS);
* NVIDIA's DCGM exporter: ``Hostname`` (the Kubernetes node name where the DaemonSet sets it, else the OS
  hostname), Kubernetes ``node`` labels where relabelled, and Prometheus's ``instance`` (``host:port`` it
  scraped: the node's IP, or with the VPC CNI a pod IP that is a secondary address of the node's interfaces);
* SageMaker HyperPod names its EKS nodes ``hyperpod-i-0abc...`` after the instance id ListClusterNodes returns.

A value that names an instance id or an IP not in the cluster belongs to another node and is ignored; a value
that matches nothing known (a Slurm hostname no tag maps) is *unmatched*, so the checks can say "metrics found
but not matched" instead of "no metrics".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fmdoctor.engine.identity import NodeIdentities, ip_of_hostname

__all__ = ["NodeIdentity", "NodeIndex", "Resolved", "ip_of_hostname"]


@dataclass(frozen=True)
class NodeIdentity:
    """What is known of one node: its id (an EC2 or HyperPod instance id), IPs and names."""

    id: str
    ips: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # private DNS names, hostnames from tags, Kubernetes node names


@dataclass(frozen=True)
class Resolved:
    """A label value's node: ``node`` when it is one of ours; ``foreign`` when it names another node."""

    node: str | None = None
    foreign: bool = False

    @property
    def recognised(self) -> bool:
        return self.node is not None or self.foreign


class NodeIndex:
    """Resolves label values to the cluster's nodes through the engine's identity resolver
    (:class:`~fmdoctor.engine.identity.NodeIdentities`). A name two nodes share matches neither."""

    def __init__(self, nodes: Iterable[NodeIdentity]):
        nodes = list(nodes)
        self.ids = {node.id for node in nodes}
        self.identities = NodeIdentities.of_names({node.id: (*node.ips, *node.names) for node in nodes})
        # value -> its answer: a listing names each node in every one of its series (40 per p4d node), and the
        # resolver's answer depends on the value alone (an index is never changed after it is made)
        self._resolved: dict[str, Resolved] = {}

    def resolve(self, value: str | None) -> Resolved:
        key = value or ""
        resolved = self._resolved.get(key)
        if resolved is None:
            match = self.identities.resolve(key, suggest_close=False)
            resolved = Resolved(match.instance.id) if match.instance is not None else Resolved(foreign=match.foreign)
            self._resolved[key] = resolved
        return resolved

    def resolve_labels(self, labels: Mapping[str, str], id_labels: Sequence[str],
                       name_labels: Sequence[str]) -> tuple[Resolved, str | None]:
        """The node a series belongs to, and the identity to report when nothing matched.

        An id label (``InstanceId``) is decisive: a series naming another instance is never ours, whatever
        its hostname says. Name labels are tried in order; the first recognised one decides.
        """
        for label in id_labels:
            if labels.get(label):
                resolved = self.resolve(labels[label])
                return (resolved if resolved.recognised else Resolved(foreign=True)), None
        first = None
        for label in name_labels:
            value = labels.get(label)
            if not value:
                continue
            resolved = self.resolve(value)
            if resolved.recognised:
                return resolved, None
            first = first or f"{label}={value}"
        return Resolved(), first
