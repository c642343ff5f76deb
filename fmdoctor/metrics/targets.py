"""The accelerated nodes whose metrics a run judges, as :class:`MetricNode`, which every GPU check reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from fmdoctor.engine.inventory import COMPUTE, InstanceTypeInfo, Inventory
from fmdoctor.metrics.identity import NodeIdentity
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
