"""The cluster as fetched once per run: instances, their interfaces, groups, subnets and type facts, plus
its SageMaker endpoints and HyperPod cluster.

Plain frozen data, so every check is a pure function over it and most logic is tested without AWS. A run
fills only the parts its checks declare (``Check.inventory``); a part not asked for is left empty, and one
AWS would not return is an :class:`UnavailablePart` that fails the checks reading it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import NoReturn

from fmdoctor.engine import slots
from fmdoctor.engine.endpoints import DiscoveryGap, Endpoint
from fmdoctor.engine.errors import AwsCallFailed, AwsFailure
from fmdoctor.engine.hyperpod import HyperPodCluster

EFA_INTERFACE_TYPES = frozenset({"efa", "efa-only"})

# The parts of an inventory a check may need (Check.inventory); discovery fetches only those a run's checks
# name. The instance listing itself is always made, since it is what identifies a cluster; INSTANCES adds
# the groups, subnets and instance types of those instances.
INSTANCES = "instances"
ENDPOINTS = "endpoints"  # SageMaker endpoints tagged with the cluster or named in the config
HYPERPOD = "hyperpod"  # the SageMaker HyperPod cluster of that name, looked up when no instance carries it
INVENTORY_PARTS = frozenset({INSTANCES, ENDPOINTS, HYPERPOD})


@dataclass(frozen=True)
class SgRule:
    """One security-group rule as DescribeSecurityGroupRules returns it (one peer per rule)."""

    id: str
    group_id: str
    egress: bool
    protocol: str  # "-1" (all), "tcp", "udp", "icmp", "icmpv6" or a protocol number
    from_port: int | None = None
    to_port: int | None = None
    cidr_ipv4: str | None = None
    cidr_ipv6: str | None = None
    prefix_list_id: str | None = None
    referenced_group_id: str | None = None
    description: str = ""

    @property
    def all_traffic(self) -> bool:
        return self.protocol == "-1"

    @property
    def peer(self) -> str:
        return (self.referenced_group_id or self.cidr_ipv4 or self.cidr_ipv6 or self.prefix_list_id or "?")

    def describe(self) -> str:
        """A one-line, human form used in evidence: 'sgr-1 egress all traffic to sg-2'."""
        direction = "egress" if self.egress else "ingress"
        towards = "to" if self.egress else "from"
        if self.all_traffic:
            what = "all traffic"
        elif self.from_port is None or (self.from_port, self.to_port) in {(-1, -1), (0, 65535)}:
            what = f"{self.protocol} all ports"
        elif self.from_port == self.to_port:
            what = f"{self.protocol}/{self.from_port}"
        else:
            what = f"{self.protocol}/{self.from_port}-{self.to_port}"
        return f"{self.id} {direction} {what} {towards} {self.peer}"


@dataclass(frozen=True)
class SecurityGroup:
    id: str
    name: str
    vpc_id: str | None
    rules: tuple[SgRule, ...] = ()

    def ingress(self) -> tuple[SgRule, ...]:
        return tuple(r for r in self.rules if not r.egress)

    def egress(self) -> tuple[SgRule, ...]:
        return tuple(r for r in self.rules if r.egress)


@dataclass(frozen=True)
class NetworkInterface:
    id: str
    subnet_id: str
    vpc_id: str | None
    security_group_ids: tuple[str, ...]
    private_ips: tuple[str, ...] = ()
    public_ip: str | None = None
    interface_type: str = "interface"
    instance_id: str | None = None
    device_index: int | None = None
    network_card_index: int | None = None
    description: str = ""
    ipv6_ips: tuple[str, ...] = ()  # Ipv6Addresses (primary and assigned)

    @property
    def is_efa(self) -> bool:
        return self.interface_type in EFA_INTERFACE_TYPES

    @property
    def primary_ip(self) -> str | None:
        return self.private_ips[0] if self.private_ips else None


@dataclass(frozen=True)
class Subnet:
    id: str
    vpc_id: str
    availability_zone: str
    cidr: str
    availability_zone_id: str = ""  # the zone's id (usw2-az1), the same in every account

    @property
    def zone(self) -> str:
        """What identifies the zone across accounts: its id when DescribeSubnets gave one, else its name."""
        return self.availability_zone_id or self.availability_zone


@dataclass(frozen=True)
class NetworkCard:
    """One network card of an instance type, as DescribeInstanceTypes' NetworkInfo.NetworkCards lists it."""

    index: int
    peak_gbps: float | None = None  # PeakBandwidthInGbps: cards of one type can differ (p6-b300's card 0)
    efa: bool | None = None  # InterfaceTypes names efa/efa-only; None when the response has no InterfaceTypes


@dataclass(frozen=True)
class InstanceTypeInfo:
    name: str
    gpus: int = 0
    gpu_model: str | None = None
    gpu_memory_mib: int = 0
    neuron_devices: int = 0
    neuron_cores: int = 0
    efa_supported: bool = False
    max_efa_interfaces: int = 0
    max_network_cards: int = 1
    network_cards: tuple[NetworkCard, ...] = ()

    @property
    def accelerated(self) -> bool:
        return self.gpus > 0 or self.neuron_devices > 0

    def efa_cards(self) -> tuple[NetworkCard, ...] | None:
        """The cards that can carry an EFA interface, or None when the response does not say which."""
        if not self.network_cards or any(c.efa is None for c in self.network_cards):
            return None
        return tuple(c for c in self.network_cards if c.efa)


# Tags that name what launched an instance, most specific first (ParallelCluster's queue is read separately).
NODE_GROUP_TAGS = ("eks:nodegroup-name", "aws:pcs:compute-node-group-id", "karpenter.sh/nodepool",
                   "aws:autoscaling:groupName", "aws:ec2launchtemplate:id")

HEAD = "head"
LOGIN = "login"
COMPUTE = "compute"
INFERENCE = "inference"  # serving nodes of an EC2/EKS inference fleet (tag fmdoctor:role=inference)


@dataclass(frozen=True)
class Instance:
    id: str
    instance_type: str
    state: str
    subnet_id: str | None
    vpc_id: str | None
    availability_zone: str | None
    private_ip: str | None = None
    public_ip: str | None = None
    private_dns: str | None = None  # ip-10-0-1-23.us-west-2.compute.internal (or i-0abc... with resource naming)
    placement_group: str | None = None
    lifecycle: str = "on-demand"  # InstanceLifecycle: "spot", "scheduled", "capacity-block", ... or "on-demand"
    spot_request_id: str | None = None
    capacity_block_id: str | None = None
    capacity_reservation_id: str | None = None  # the Capacity Block or Capacity Reservation it runs in
    platform: str = ""  # DescribeInstances' Platform: "windows" for Windows, absent (here "") for Linux
    launch_time: datetime | None = None
    role: str = COMPUTE
    tags: dict[str, str] = field(default_factory=dict)
    interface_ids: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.tags.get("Name", self.id)

    @property
    def in_capacity_block(self) -> bool:
        """Launched into a Capacity Block for ML (which EC2 places in an UltraCluster itself)."""
        return self.lifecycle == "capacity-block" or bool(self.capacity_block_id)

    @property
    def node_group(self) -> str | None:
        """The group that launched this node (EKS node group, ParallelCluster queue and compute resource, PCS
        node group, Karpenter node pool, Auto Scaling group, launch template), from the tags those services and
        EC2 put on their instances; None when no such tag is there."""
        tags = self.tags
        if "parallelcluster:compute-resource-name" in tags:  # unique within its queue, which may be tagged too
            return (f"parallelcluster:{tags.get('parallelcluster:queue-name', '')}/"
                    f"{tags['parallelcluster:compute-resource-name']}")
        for key in NODE_GROUP_TAGS:
            if tags.get(key):
                return f"{key}={tags[key]}"
        return None


class UnavailablePart(dict):  # type: ignore[type-arg]
    """Stands in for an inventory part AWS would not return (denied, throttled, timed out).

    Any read raises that failure inside the check that made it, so exactly the checks that need the part
    report an error naming the missing IAM action, and every other check still runs and reports.
    """

    def __init__(self, part: str, failure: AwsFailure):
        super().__init__()
        self.part = part
        self.failure = failure

    def _fail(self, *_: object, **__: object) -> NoReturn:
        raise AwsCallFailed(self.failure, f"the cluster's {self.part.replace('_', ' ')}")

    __getitem__ = __iter__ = __len__ = __contains__ = __bool__ = get = keys = values = items = _fail


@dataclass(frozen=True)
class Inventory:
    cluster: str
    region: str
    instances: tuple[Instance, ...] = ()
    interfaces: dict[str, NetworkInterface] = field(default_factory=dict)
    security_groups: dict[str, SecurityGroup] = field(default_factory=dict)
    subnets: dict[str, Subnet] = field(default_factory=dict)
    instance_types: dict[str, InstanceTypeInfo] = field(default_factory=dict)
    subnets_of_vpcs: tuple[str, ...] = ()  # VPCs every subnet of which is in ``subnets`` (asked by vpc-id)
    # Found by name when no EC2 instance carries it: HyperPod's nodes are not instances of this account.
    hyperpod: HyperPodCluster | None = None
    endpoints: tuple[Endpoint, ...] = ()  # SageMaker endpoints tagged with the cluster or named in the config
    endpoint_gaps: tuple[DiscoveryGap, ...] = ()  # what endpoint discovery could not read
    # The tags the configuration says carry a node's host name (gpu.hostname_tags): every reader of this inventory's
    # node names (fmdoctor.engine.identity.NodeIdentities.of) knows them, not only those handed the setting.
    hostname_tags: tuple[str, ...] = ()

    def is_empty(self) -> bool:
        """Nothing of the cluster was found: the name is wrong, or the region, or the tag keys."""
        return not self.instances and self.hyperpod is None and not self.endpoints

    def instance(self, instance_id: str) -> Instance | None:
        return self._by_id().get(instance_id)

    def _by_id(self) -> dict[str, Instance]:
        index = self.__dict__.get("_index")
        if index is None:
            index = {i.id: i for i in self.instances}
            object.__setattr__(self, "_index", index)  # frozen dataclass: cache the lookup table once
        return index

    def type_of(self, instance: Instance) -> InstanceTypeInfo:
        return self.instance_types.get(instance.instance_type) or InstanceTypeInfo(instance.instance_type)

    def interfaces_of(self, instance: Instance) -> list[NetworkInterface]:
        return [self.interfaces[e] for e in instance.interface_ids if e in self.interfaces]

    def efa_interfaces(self) -> list[NetworkInterface]:
        return [eni for inst in self.instances for eni in self.interfaces_of(inst) if eni.is_efa]

    def compute_nodes(self) -> list[Instance]:
        return [i for i in self.instances if i.role == COMPUTE]

    def head_nodes(self) -> list[Instance]:
        return [i for i in self.instances if i.role == HEAD]

    def inference_nodes(self) -> list[Instance]:
        return [i for i in self.instances if i.role == INFERENCE]

    def accelerated_nodes(self) -> list[Instance]:
        """Compute nodes with GPUs or Neuron devices: the ones training (or serving) runs on."""
        return [i for i in self.compute_nodes() if self.type_of(i).accelerated]

    def groups_of(self, eni: NetworkInterface) -> list[SecurityGroup]:
        return [self.security_groups[g] for g in eni.security_group_ids if g in self.security_groups]

    def label(self, instance_id: str) -> str:
        """'gpu-node-6 (i-0abc...)' when the node has a Name tag, else the id: for summaries people read."""
        instance = self.instance(instance_id)
        return f"{instance.name} ({instance.id})" if instance and instance.name != instance.id else instance_id

    def vpc_ids(self) -> set[str]:
        return {i.vpc_id for i in self.instances if i.vpc_id}

    def subnets_for(self, vpc_ids: Iterable[str]) -> dict[str, Subnet] | None:
        """Every subnet of ``vpc_ids`` when discovery asked for all of theirs (so a topology need not ask
        again), else None."""
        wanted = set(vpc_ids)
        if not wanted or not wanted <= set(self.subnets_of_vpcs):
            return None
        return {k: s for k, s in self.subnets.items() if s.vpc_id in wanted}


def chunked(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class StagedInventory:
    """The inventory as its parts arrive: ``first`` (the instance listing and every part but ``later``'s) at
    once, the whole when ``later`` (the slower parts, e.g. the SageMaker endpoint chain) ends. A check that reads
    none of ``later_parts`` runs on ``first`` without waiting (it sees those parts empty, as a run that did not
    ask for them does); the others wait for the whole."""

    def __init__(self, first: Inventory, later: Future[Inventory] | None = None,
                 later_parts: frozenset[str] = frozenset()):
        self.first = first
        self._later = later
        self._later_parts = later_parts if later is not None else frozenset()

    def needs_wait(self, parts: frozenset[str]) -> bool:
        return bool(parts & self._later_parts) and self._later is not None and not self._later.done()

    def for_parts(self, parts: frozenset[str]) -> Inventory:
        """The inventory a check reading ``parts`` sees (waiting, its worker slot given up, for a later part)."""
        if not parts & self._later_parts:
            return self.first
        return self.whole()

    def on_failure(self, call: Callable[[], None]) -> None:
        """``call()`` as soon as the later parts' discovery fails (at once if it has)."""
        if self._later is not None:
            self._later.add_done_callback(lambda done: call() if done.exception() is not None else None)

    def whole(self) -> Inventory:
        """Every part; raises what the later parts' discovery raised."""
        if self._later is None:
            return self.first
        if not self._later.done():
            with slots.waiting():
                self._later.exception()
        return self._later.result()
