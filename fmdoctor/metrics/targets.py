"""The accelerated nodes whose metrics a run judges: the cluster's EC2 instances and its HyperPod nodes.

HyperPod's nodes run in a SageMaker service account, so they are no EC2 instances of the user's: they are
listed with ListClusterNodes and named by the instance id it returns (``i-0abc...``; ``hyperpod-i-0abc...``
as Kubernetes nodes). Both kinds become :class:`MetricNode`, which every metric source and GPU check reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fmdoctor.engine.discovery import INSTANCE_TYPES_MAX, instance_type_info
from fmdoctor.engine.hyperpod import HyperPodNode
from fmdoctor.engine.inventory import COMPUTE, InstanceTypeInfo, Inventory, chunked
from fmdoctor.metrics.identity import NodeIdentity, ip_of_hostname
from fmdoctor.metrics.nodes import kind_of
from fmdoctor.metrics.series import instance_identity

EC2 = "ec2"
HYPERPOD_RUNNING = "Running"


@dataclass(frozen=True)
class MetricNode:
    id: str
    label: str  # for summaries: 'gpu-node-6 (i-0abc...)'
    instance_type: str
    kind: str  # GPU or NEURON
    expected_devices: int  # GPUs, or NeuronCores (neuron-monitor reports utilization per core)
    identity: NodeIdentity
    launch_time: datetime | None = None
    group: str = EC2  # nodes are compared (straggler) only within their group: EC2, or one HyperPod cluster
    efa: bool = False  # has EFA interfaces (EC2), or is of a type that supports EFA (HyperPod)

    @property
    def hyperpod(self) -> bool:
        return self.group != EC2


def expected_devices(info: InstanceTypeInfo) -> int:
    return info.gpus or info.neuron_cores


def ec2_nodes(inventory: Inventory, hostname_tags: Sequence[str] = ()) -> list[MetricNode]:
    """The running accelerated compute instances of the cluster."""
    nodes = []
    for instance in inventory.instances:
        info = inventory.type_of(instance)
        kind = kind_of(info)
        if instance.state != "running" or instance.role != COMPUTE or kind is None:
            continue
        nodes.append(MetricNode(instance.id, inventory.label(instance.id), instance.instance_type, kind,
                                expected_devices(info), instance_identity(instance, inventory, hostname_tags),
                                instance.launch_time,
                                efa=any(e.is_efa for e in inventory.interfaces_of(instance))))
    return nodes


def hyperpod_nodes(cluster: str, nodes: Iterable[HyperPodNode], types: dict[str, InstanceTypeInfo]) -> list[MetricNode]:
    """The Running accelerated nodes of a HyperPod cluster (the others are hyperpod-node-unhealthy's), named by
    instance id, Kubernetes node name and ListClusterNodes' PrivateDnsHostname (whose ip-a-b-c-d is its IP)."""
    found = []
    for node in nodes:
        info = types.get(node.instance_type) or InstanceTypeInfo(node.instance_type)
        kind = kind_of(info)
        if node.status != HYPERPOD_RUNNING or kind is None:
            continue
        ip = ip_of_hostname(node.private_dns or "")
        names = (f"hyperpod-{node.node_id}", *([node.private_dns] if node.private_dns else []))
        identity = NodeIdentity(node.node_id, (ip,) if ip else (), names)
        found.append(MetricNode(node.node_id, f"{cluster}/{node.group} ({node.node_id})", node.instance_type, kind,
                                expected_devices(info), identity, node.launch_time, group=f"hyperpod:{cluster}",
                                efa=info.efa_supported))
    return found


def sagemaker_instance_types(ec2: Any, names: Iterable[str]) -> dict[str, InstanceTypeInfo]:
    """Accelerator facts of SageMaker ``ml.*`` types from EC2's catalogue (a filter, not InstanceTypes=, so one
    type EC2 does not know fails nothing)."""
    wanted = sorted(set(names))
    infos: dict[str, InstanceTypeInfo] = {}
    for batch in chunked(wanted, INSTANCE_TYPES_MAX):
        by_ec2_name = {t.removeprefix("ml."): t for t in batch}
        for page in ec2.get_paginator("describe_instance_types").paginate(
            Filters=[{"Name": "instance-type", "Values": sorted(by_ec2_name)}]
        ):
            for raw in page.get("InstanceTypes", []):
                info = instance_type_info(raw)
                infos[by_ec2_name.get(info.name, info.name)] = info
    return infos
