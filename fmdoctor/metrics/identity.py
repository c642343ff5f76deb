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

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_INSTANCE_ID = re.compile(r"(?:^|[-.])(i-[0-9a-f]{8,17})(?=$|[.:])")
_IP_HOSTNAME = re.compile(r"^ip-(\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3})(?:\.|$)")


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


LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def ip_of_hostname(host: str) -> str | None:
    """10.0.1.23 for ip-10-0-1-23[.anything]."""
    match = _IP_HOSTNAME.match(host)
    return match.group(1).replace("-", ".") if match else None


def _ip(value: str) -> str | None:
    host = value.rsplit(":", 1)[0] if value.count(":") == 1 else value  # host:port (Prometheus's instance)
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        return ip_of_hostname(host)


def _says_nothing(value: str) -> bool:
    """A name every node has (an exporter scraped as localhost by an agent on the node itself)."""
    host = value.rsplit(":", 1)[0].lower() if value.count(":") == 1 else value.lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.IPv4Address(host).is_loopback
    except ValueError:
        return False


class NodeIndex:
    """Resolves label values to the cluster's nodes. A name two nodes share matches neither."""

    def __init__(self, nodes: Iterable[NodeIdentity]):
        self.ids: set[str] = set()
        self.by_ip: dict[str, str] = {}
        names: dict[str, set[str]] = {}
        for node in nodes:
            self.ids.add(node.id)
            for ip in node.ips:
                self.by_ip[ip] = node.id
            for name in node.names:
                for form in {name.lower(), name.lower().split(".", 1)[0]}:
                    names.setdefault(form, set()).add(node.id)
        self.by_name = {name: next(iter(owners)) for name, owners in names.items() if len(owners) == 1}

    def resolve(self, value: str | None) -> Resolved:
        if not value or _says_nothing(value.strip()):
            return Resolved()
        value = value.strip()
        if value in self.ids:
            return Resolved(value)
        match = _INSTANCE_ID.search(value.lower())
        if match:
            found = match.group(1)
            return Resolved(found) if found in self.ids else Resolved(foreign=True)
        ip = _ip(value)
        if ip is not None:
            owner = self.by_ip.get(ip)
            return Resolved(owner) if owner else Resolved(foreign=True)
        lowered = value.lower()
        owner = self.by_name.get(lowered) or self.by_name.get(lowered.split(".", 1)[0])
        return Resolved(owner) if owner else Resolved()

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
