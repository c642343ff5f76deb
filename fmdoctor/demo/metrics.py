"""Publish what the CloudWatch agent would for a cluster's nodes: NVIDIA, Neuron and EFA metrics.

Shared by the demo seeder, the tests and the benchmark. Each series gets one datapoint per period (the
agent's one-minute samples, already averaged), stamped relative to ``now`` so a run right after seeding
sees a full window. Datapoints go out in PutMetricData calls of up to 1,000 metrics, CloudWatch's limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

PUT_METRIC_DATA_MAX = 1000
DESCRIBE_MAX = 1000
H100 = ("NVIDIA H100 80GB HBM3", 81559.0)
A100_40GB = ("NVIDIA A100-SXM4-40GB", 40960.0)


def hostname(private_ip: str, region: str) -> str:
    return f"ip-{private_ip.replace('.', '-')}.{region}.compute.internal"


def jitter(*seed: int) -> float:
    """A small deterministic wobble (-1..+1) so series look measured, not typed in."""
    return ((sum((i + 1) * 7919 * s for i, s in enumerate(seed)) % 21) - 10) / 10


@dataclass
class MetricsPublisher:
    cloudwatch: Any
    now: datetime
    region: str = "us-west-2"
    period: timedelta = timedelta(minutes=5)
    periods: int = 6
    pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # namespace -> datums
    calls: int = 0

    def _stamp(self, k: int) -> datetime:
        return self.now - self.period * k - self.period / 2

    def _add(self, namespace: str, name: str, dims: dict[str, str], value: float, k: int, unit: str) -> None:
        self.pending.setdefault(namespace, []).append({
            "MetricName": name,
            "Dimensions": [{"Name": key, "Value": v} for key, v in dims.items()],
            "Timestamp": self._stamp(k),
            "Value": value,
            "Unit": unit,
        })

    def gpu_node(
        self,
        instance_id: str,
        private_ip: str,
        utilization: float | Sequence[float],
        *,
        gpus: int = 8,
        gpu: tuple[str, float] = H100,
        memory_percent: float | Sequence[float] = 80.0,
        instance_type: str = "p5.48xlarge",
        append_instance_id: bool = True,
        present: Iterable[int] | None = None,
        namespace: str = "CWAgent",
        indices: Iterable[int] | None = None,
    ) -> None:
        """The agent's nvidia_gpu metrics: per GPU (``index``, ``name``, ``host``), InstanceId appended or not."""
        name, total = gpu
        periods = list(present) if present is not None else list(range(self.periods))
        for index in indices if indices is not None else range(gpus):
            util = utilization[index] if isinstance(utilization, Sequence) else utilization
            memory = memory_percent[index] if isinstance(memory_percent, Sequence) else memory_percent
            dims = {"host": hostname(private_ip, self.region), "index": str(index), "name": name}
            if append_instance_id:
                dims = {"InstanceId": instance_id, "InstanceType": instance_type, **dims}
            for k in periods:
                wobble = jitter(index, k)
                value = min(100.0, max(0.0, util + (2 * wobble if util > 5 else 0.5 * abs(wobble))))
                self._add(namespace, "nvidia_smi_utilization_gpu", dims, round(value), k, "Percent")
                used = min(total, total * (memory + 0.3 * wobble) / 100)
                self._add(namespace, "nvidia_smi_memory_used", dims, round(used), k, "Megabytes")
                self._add(namespace, "nvidia_smi_memory_total", dims, total, k, "Megabytes")

    def container_insights_node(
        self,
        instance_id: str,
        private_ip: str,
        utilization: float | Sequence[float],
        *,
        gpus: int = 8,
        gpu: tuple[str, float] = H100,
        memory_percent: float = 80.0,
        instance_type: str = "p5.48xlarge",
        cluster: str = "eks-train",
    ) -> None:
        """Container Insights' DCGM-based ``node_gpu_*`` metrics (namespace ContainerInsights, memory in bytes)
        with the agent's three dimension sets: per GPU (``GpuDevice``), per node and per cluster."""
        node = {"ClusterName": cluster, "InstanceId": instance_id, "NodeName": hostname(private_ip, self.region)}
        total = gpu[1] * 2**20
        for k in range(self.periods):
            sums = {"node_gpu_utilization": 0.0, "node_gpu_memory_used": 0.0, "node_gpu_memory_total": 0.0}
            for index in range(gpus):
                util = utilization[index] if isinstance(utilization, Sequence) else utilization
                wobble = jitter(index, k)
                values = {
                    "node_gpu_utilization": min(100.0, max(0.0, round(util + (2 * wobble if util > 5 else 0)))),
                    "node_gpu_memory_used": float(round(total * (memory_percent + 0.3 * wobble) / 100)),
                    "node_gpu_memory_total": total,
                }
                dims = {**node, "InstanceType": instance_type, "GpuDevice": f"nvidia{index}"}
                for name, value in values.items():
                    self._add("ContainerInsights", name, dims, value, k, "Percent" if "util" in name else "Bytes")
                    sums[name] += value
            for name, value in sums.items():  # the per-node and per-cluster aggregates (means over the GPUs)
                unit = "Percent" if "util" in name else "Bytes"
                self._add("ContainerInsights", name, node, value / gpus, k, unit)
                self._add("ContainerInsights", name, {"ClusterName": cluster}, value / gpus, k, unit)

    def neuron_node(self, instance_id: str, utilization: float | Sequence[float], *, cores: int = 32,
                    instance_type: str = "trn1.32xlarge", namespace: str = "NeuronMonitor",
                    metric: str = "neuroncore_utilization") -> None:
        """neuron-monitor's per-NeuronCore utilization, as its CloudWatch publisher sends it."""
        for core in range(cores):
            util = utilization[core] if isinstance(utilization, Sequence) else utilization
            dims = {"InstanceId": instance_id, "InstanceType": instance_type, "NeuronCore": str(core)}
            for k in range(self.periods):
                value = min(100.0, max(0.0, util + 2 * jitter(core, k)))
                self._add(namespace, metric, dims, round(value, 1), k, "Percent")

    def efa_interface(self, eni_id: str, device: str, counters: dict[str, float] | None = None, *,
                      metrics: Sequence[str] = (), instance_id: str | None = None,
                      namespace: str = "CWAgent") -> None:
        """The agent's EFA counters (deltas per period) with its default dimensions: device, port, eniId."""
        counters = counters or {}
        dims = {"device": device, "eniId": eni_id, "port": "1"}
        if instance_id:
            dims["InstanceId"] = instance_id
        for name in sorted({*metrics, *counters}):
            total = int(counters.get(name, 0))
            base, extra = divmod(total, self.periods)
            for k in range(self.periods):  # k = 0 is the latest period: the remainder lands there (rising)
                self._add(namespace, name, dims, float(base + (1 if k < extra else 0)), k, "Count")

    def flush(self) -> int:
        """Send everything queued; returns the number of PutMetricData calls made."""
        calls = 0
        for namespace, datums in self.pending.items():
            for start in range(0, len(datums), PUT_METRIC_DATA_MAX):
                batch = datums[start: start + PUT_METRIC_DATA_MAX]
                self.cloudwatch.put_metric_data(Namespace=namespace, MetricData=batch)
                calls += 1
        self.pending.clear()
        self.calls += calls
        return calls


@dataclass(frozen=True)
class LaunchedNode:
    name: str
    id: str
    private_ip: str
    enis: tuple[str, ...] = ()  # by network card
    efa: tuple[bool, ...] = ()  # per interface in ``enis``: is it an EFA interface

    def efa_enis(self) -> list[str]:
        return [eni for eni, is_efa in zip(self.enis, self.efa, strict=True) if is_efa]


def describe_nodes(ec2: Any, names_by_id: dict[str, str]) -> list[LaunchedNode]:
    """Private IPs and interfaces (by network card) of launched instances, in the order given."""
    found: dict[str, LaunchedNode] = {}
    ids = list(names_by_id)
    for start in range(0, len(ids), DESCRIBE_MAX):
        pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=ids[start: start + DESCRIBE_MAX])
        for page in pages:
            for reservation in page["Reservations"]:
                for raw in reservation["Instances"]:
                    enis = sorted(raw["NetworkInterfaces"], key=lambda e: e["Attachment"].get("NetworkCardIndex", 0))
                    found[raw["InstanceId"]] = LaunchedNode(
                        names_by_id[raw["InstanceId"]], raw["InstanceId"], raw["PrivateIpAddress"],
                        tuple(e["NetworkInterfaceId"] for e in enis),
                        tuple(e.get("InterfaceType") in ("efa", "efa-only") for e in enis),
                    )
    return [found[i] for i in ids]


def launch_nodes(builder: Any, count: int, instance_type: str = "p5.48xlarge", prefix: str = "gpu",
                 efa_interfaces: int = 0, group: str = "nodes") -> list[LaunchedNode]:
    """``count`` more nodes named ``prefix-N`` in the builder's first subnet, described."""
    if group not in builder.groups:
        builder.security_group(group, self_ingress=True, self_egress=True)
    start = sum(1 for n in builder.nodes if n.startswith(prefix + "-")) + 1
    names = [f"{prefix}-{i}" for i in range(start, start + count)]
    subnet = next(iter(builder.subnets))
    ids = builder.launch(names, instance_type, subnet, [group], efa_interfaces=efa_interfaces)
    return describe_nodes(builder.ec2, dict(zip(ids, names, strict=True)))
