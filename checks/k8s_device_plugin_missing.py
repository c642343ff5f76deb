from __future__ import annotations

from typing import Any

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.scheduler.kubernetes import PLUGIN_FOR, plugin_of
from fmdoctor.scheduler.model import KUBERNETES, SchedulerNode
from fmdoctor.scheduler.source import SchedulerMap

from ._scheduler import node_evidence, node_label, resource_of, scheduler_map

GPU, EFA = "nvidia.com/gpu", "vpc.amazonaws.com/efa"
NEURON_DEVICE = ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice")


def expected(ctx: CheckContext, found: SchedulerMap, node: SchedulerNode) -> tuple[dict[str, int], str]:
    """What the node should advertise, and from where: the instance (its type's GPUs/Neuron devices, its
    attached EFA interfaces) when the identity maps it, else the node's own capacity."""
    instance_id = found.instance_of.get(node.name)
    instance = ctx.inventory.instance(instance_id) if instance_id else None
    if instance is None:
        return dict(node.configured), "the node's own capacity"
    kind = ctx.inventory.type_of(instance)
    out: dict[str, int] = {}
    if kind.gpus:
        out[GPU] = kind.gpus
    if kind.neuron_devices:
        name = next((n for n in NEURON_DEVICE if n in node.allocatable or n in node.configured), NEURON_DEVICE[0])
        out[name] = kind.neuron_devices
    efa = sum(1 for eni in ctx.inventory.interfaces_of(instance) if eni.is_efa)
    if efa:
        out[EFA] = efa
    return out, f"{instance.instance_type} with {efa} EFA interfaces attached" if efa else instance.instance_type


class K8sDevicePluginMissing(Check):
    """On every Ready Kubernetes node, the scheduler can allocate every accelerator and EFA device the instance
    has: allocatable nvidia.com/gpu, aws.amazon.com/neuron* and vpc.amazonaws.com/efa are not fewer than the
    instance type's GPUs / Neuron devices and its attached EFA interfaces (or, for a node no instance matches,
    than the node's capacity).

    Extended resources exist on a node only as its device plugin advertises them, and only healthy devices are
    allocatable (https://kubernetes.io/docs/concepts/extend-kubernetes/compute-storage-net/device-plugins/):
    fewer means the plugin is missing, crashed or marked devices unhealthy (NVIDIA k8s-device-plugin,
    https://github.com/NVIDIA/k8s-device-plugin; the EFA plugin of the EKS charts, https://github.com/aws/
    eks-charts/tree/master/stable/aws-efa-k8s-device-plugin). Pods that request them will not schedule there.
    """

    id = "k8s-device-plugin-missing"
    family = "scheduler"
    concerns = frozenset({NODE})
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "ec2:DescribeNetworkInterfaces")

    def run(self, ctx: CheckContext) -> list[Finding]:
        found = scheduler_map(ctx, KUBERNETES)
        findings = []
        for node in found.view.nodes:
            if "READY" not in node.states:
                continue  # k8s-node-not-ready reports it; a NotReady kubelet advertises nothing new
            want, basis = expected(ctx, found, node)
            short = {r: (node.allocatable.get(r, 0), n) for r, n in want.items() if node.allocatable.get(r, 0) < n}
            if not short:
                continue
            plugins = [p for p in found.view.device_plugins if node.name in p.nodes]
            wanted_plugins = sorted({PLUGIN_FOR.get(r, r) for r in short})
            missing = [p for p in wanted_plugins if not any(plugin_of(j.name) == p for j in plugins)]
            evidence: dict[str, Any] = node_evidence(found, node)
            evidence.update(expected=want, expected_from=basis, allocatable=dict(node.allocatable),
                            capacity=dict(node.configured),
                            device_plugins=[p.to_evidence() for p in plugins], plugins_absent=missing)
            gaps = ", ".join(f"{r} {have} of {n}" for r, (have, n) in sorted(short.items()))
            why = (f"no {', '.join(missing)} pod runs on it" if missing else
                   "its device plugin pods: " + ", ".join(f"{p.name} {p.state}" for p in plugins))
            findings.append(self.finding(
                resource=resource_of(found, node),
                summary=(f"Kubernetes can allocate only {gaps} on {node_label(found, node)} ({basis}); {why}."),
                evidence=evidence,
            ))
        return findings
