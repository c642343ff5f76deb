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

from fmdoctor.demo import moto_cloudwatch
from fmdoctor.demo.builders import LaunchedNode, launched_node

PUT_METRIC_DATA_MAX = 1000
DESCRIBE_MAX = 1000
H100 = ("NVIDIA H100 80GB HBM3", 81559.0)
A100_40GB = ("NVIDIA A100-SXM4-40GB", 40960.0)
# nvidia-smi's product_architecture, which the agent publishes as the ``arch`` dimension; board power limits.
ARCH = {H100[0]: "Hopper", A100_40GB[0]: "Ampere"}
POWER_LIMIT_W = {H100[0]: 700.0, A100_40GB[0]: 400.0}
IDLE_POWER_W = 70.0
BOOST_SM_CLOCK_MHZ = {H100[0]: 1980.0, A100_40GB[0]: 1410.0}
IDLE_SM_CLOCK_MHZ = 345.0


def power_for(gpu_name: str, utilization: float) -> float:
    """A plausible draw for a training kernel mix at this utilization (idle floor, rising to ~90% of the limit)."""
    return IDLE_POWER_W + (0.9 * POWER_LIMIT_W.get(gpu_name, 700.0) - IDLE_POWER_W) * utilization / 100


def hostname(private_ip: str, region: str) -> str:
    return f"ip-{private_ip.replace('.', '-')}.{region}.compute.internal"


def jitter(*seed: int) -> float:
    """A small deterministic wobble (-1..+1) so series look measured, not typed in."""
    return ((sum((i + 1) * 7919 * s for i, s in enumerate(seed)) % 21) - 10) / 10


def gpu_sample(gpu_name: str, total_mib: float, utilization: float, memory_percent: float, index: int, k: int,
               power_w: float | None = None, sm_clock_mhz: float | None = None) -> dict[str, float]:
    """One GPU's values for period k (0 = the latest), as a node's agent or exporter would report them: the
    story's values with a small deterministic wobble; power and SM clock follow utilization unless given."""
    wobble = jitter(index, k)
    value = float(round(min(100.0, max(0.0, utilization + (2 * wobble if utilization > 5 else 0.5 * abs(wobble))))))
    used = float(round(min(total_mib, total_mib * (memory_percent + 0.3 * wobble) / 100)))
    watts = power_w if power_w is not None else power_for(gpu_name, value)
    clock = sm_clock_mhz if sm_clock_mhz is not None else (
        BOOST_SM_CLOCK_MHZ.get(gpu_name, 1980.0) if value > 5 else IDLE_SM_CLOCK_MHZ)
    return {"utilization": value, "memory_used": used, "power": round(watts + wobble, 2), "sm_clock": clock}


@dataclass
class MetricsPublisher:
    cloudwatch: Any
    now: datetime
    region: str = "us-west-2"
    period: timedelta = timedelta(minutes=5)
    periods: int = 6
    pending: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # namespace -> datums
    calls: int = 0
    # moto's CloudWatch backend, when moto answers in this process (moto_cloudwatch.backend_answering): the
    # batches go straight to it instead of through ``cloudwatch``'s requests (the same datapoints, a fraction of
    # the CPU: the demo's 14 requests of 1,000 datapoints were a quarter of its seeding).
    backend: Any = None

    def _stamp(self, k: int) -> datetime:
        # Whole seconds, as the agent stamps its samples: the same instant through any protocol's encoding.
        return self.now.replace(microsecond=0) - self.period * k - self.period / 2

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
        host: str | None = None,
        by_period: dict[int, dict[str, Sequence[float]]] | None = None,
        power_w: float | None = None,
        sm_clock_mhz: float | None = None,
    ) -> None:
        """The agent's nvidia_gpu metrics with its dimensions (aws/amazon-cloudwatch-agent plugins/inputs/nvidia_smi:
        ``index``, ``name``, ``arch``, ``host``; ``uuid``, ``pstate`` and ``compute_mode`` are on its deny list),
        InstanceId appended or not. ``host`` replaces the EC2 hostname (a Slurm node name); ``by_period`` gives a
        GPU's own ``utilization``/``memory_percent`` per period (index 0 the oldest); power and SM clock follow
        utilization unless given."""
        name, total = gpu
        periods = list(present) if present is not None else list(range(self.periods))
        for index in indices if indices is not None else range(gpus):
            util = utilization[index] if isinstance(utilization, Sequence) else utilization
            memory = memory_percent[index] if isinstance(memory_percent, Sequence) else memory_percent
            trend = (by_period or {}).get(index, {})
            dims = {"arch": ARCH.get(name, "Hopper"), "host": host or hostname(private_ip, self.region),
                    "index": str(index), "name": name}
            if append_instance_id:
                dims = {"InstanceId": instance_id, "InstanceType": instance_type, **dims}
            for k in periods:
                oldest_first = self.periods - 1 - k
                u = trend["utilization"][oldest_first] if "utilization" in trend else util
                m = trend["memory_percent"][oldest_first] if "memory_percent" in trend else memory
                sample = gpu_sample(name, total, u, m, index, k, power_w, sm_clock_mhz)
                self._add(namespace, "nvidia_smi_utilization_gpu", dims, sample["utilization"], k, "Percent")
                self._add(namespace, "nvidia_smi_memory_used", dims, sample["memory_used"], k, "Megabytes")
                self._add(namespace, "nvidia_smi_memory_total", dims, total, k, "Megabytes")
                self._add(namespace, "nvidia_smi_power_draw", dims, sample["power"], k, "None")
                self._add(namespace, "nvidia_smi_clocks_current_sm", dims, sample["sm_clock"], k, "None")

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
        memory_by_period: Sequence[float] | None = None,
    ) -> None:
        """Container Insights' DCGM-based ``node_gpu_*`` metrics (namespace ContainerInsights, memory in bytes)
        with the agent's three dimension sets (translator/translate/otel/exporter/awsemf/kubernetes.go): per GPU
        (``GpuDevice``), per node and per cluster. ``memory_by_period`` is every GPU's memory share per period,
        the oldest first."""
        node = {"ClusterName": cluster, "InstanceId": instance_id, "NodeName": hostname(private_ip, self.region)}
        total = gpu[1] * 2**20
        for k in range(self.periods):
            sums = {"node_gpu_utilization": 0.0, "node_gpu_memory_used": 0.0, "node_gpu_memory_total": 0.0,
                    "node_gpu_power_draw": 0.0}
            for index in range(gpus):
                util = utilization[index] if isinstance(utilization, Sequence) else utilization
                wobble = jitter(index, k)
                busy = min(100.0, max(0.0, round(util + (2 * wobble if util > 5 else 0))))
                memory = memory_by_period[self.periods - 1 - k] if memory_by_period else memory_percent
                values = {
                    "node_gpu_utilization": busy,
                    "node_gpu_memory_used": float(round(total * (memory + 0.3 * wobble) / 100)),
                    "node_gpu_memory_total": total,
                    "node_gpu_power_draw": round(power_for(gpu[0], busy) + wobble, 2),
                }
                dims = {**node, "InstanceType": instance_type, "GpuDevice": f"nvidia{index}"}
                for name, value in values.items():
                    self._add("ContainerInsights", name, dims, value, k, _insights_unit(name))
                    sums[name] += value
            for name, value in sums.items():  # the per-node and per-cluster aggregates (means over the GPUs)
                unit = _insights_unit(name)
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
                if self.backend is not None:
                    moto_cloudwatch.put_metric_data(self.backend, namespace, batch)
                else:
                    self.cloudwatch.put_metric_data(Namespace=namespace, MetricData=batch)
                calls += 1
        self.pending.clear()
        self.calls += calls
        return calls


def _insights_unit(name: str) -> str:
    return "Percent" if "util" in name else "None" if "power" in name else "Bytes"


def describe_nodes(ec2: Any, names_by_id: dict[str, str]) -> list[LaunchedNode]:
    """Private IPs and interfaces (by network card) of launched instances, in the order given. Nodes launched
    through a :class:`ClusterBuilder` need no call: ``builder.launched`` holds the same facts."""
    found: dict[str, LaunchedNode] = {}
    ids = list(names_by_id)
    for start in range(0, len(ids), DESCRIBE_MAX):
        pages = ec2.get_paginator("describe_instances").paginate(InstanceIds=ids[start: start + DESCRIBE_MAX])
        for page in pages:
            for reservation in page["Reservations"]:
                for raw in reservation["Instances"]:
                    found[raw["InstanceId"]] = launched_node(names_by_id[raw["InstanceId"]], raw)
    return [found[i] for i in ids]


def launch_nodes(builder: Any, count: int, instance_type: str = "p5.48xlarge", prefix: str = "gpu",
                 efa_interfaces: int = 0, group: str = "nodes") -> list[LaunchedNode]:
    """``count`` more nodes named ``prefix-N`` in the builder's first subnet, as their launch described them."""
    if group not in builder.groups:
        builder.security_group(group, self_ingress=True, self_egress=True)
    start = sum(1 for n in builder.nodes if n.startswith(prefix + "-")) + 1
    names = [f"{prefix}-{i}" for i in range(start, start + count)]
    subnet = next(iter(builder.subnets))
    builder.launch(names, instance_type, subnet, [group], efa_interfaces=efa_interfaces)
    return [builder.launched[name] for name in names]
