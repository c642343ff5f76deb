from __future__ import annotations

from collections import defaultdict

from fmdoctor.engine.check import Check, NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.inventory import Instance, Inventory
from fmdoctor.engine.model import Finding, Severity

from ._common import id_list, plural, sample
from ._net import groups_using_efa


class EfaNotAttached(Check):
    """Every compute node that is expected to use EFA has at least one EFA interface: accelerated (GPU or
    Neuron) nodes of an EFA-capable type, and nodes of a node group (launch template, Auto Scaling group, EKS
    node group, ParallelCluster compute resource) whose other nodes carry EFA.

    Without one, NCCL/libfabric fall back to TCP over the ENA interface: collectives run many times slower and
    a synchronous job runs at that node's pace. EFA-capable CPU nodes (a c6i.32xlarge for data preparation,
    a head node) need none: the EKS guide (awsdocs/amazon-eks-user-guide latest/ug/ml/node-efa.adoc)
    recommends "that an instance has hardware acceleration chips" in addition to the EFA, so such nodes get
    an ``info`` finding at most. Support comes from DescribeInstanceTypes (NetworkInfo.EfaSupported, GpuInfo,
    NeuronInfo); a type it does not return is reported as not judged.
    """

    id = "efa-not-attached"
    family = "efa"
    concerns = frozenset({NODE})
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        unknown = sorted({i.instance_type for i in inv.compute_nodes() if i.instance_type not in inv.instance_types})
        if unknown:
            ctx.unverified(f"EFA support of instance types {', '.join(unknown)}", "InstanceTypeUnknown",
                           "DescribeInstanceTypes did not return them in this region")
        capable = [i for i in inv.compute_nodes() if inv.type_of(i).efa_supported]
        if not capable:
            if unknown:  # nothing judged: that is not 'not applicable'
                raise Unverified()
            raise NotApplicable("no compute node has an EFA-capable instance type")
        efa_groups = groups_using_efa(inv)
        findings = []
        optional: dict[str, list[Instance]] = defaultdict(list)
        for node in capable:
            if any(e.is_efa for e in inv.interfaces_of(node)):
                continue
            info = inv.type_of(node)
            if info.accelerated or node.node_group in efa_groups:
                findings.append(self._expected(inv, node))
            else:
                optional[node.instance_type].append(node)
        findings.extend(self._optional(inv, instance_type, nodes) for instance_type, nodes in sorted(optional.items()))
        return findings

    def _expected(self, inv: Inventory, node: Instance) -> Finding:
        info = inv.type_of(node)
        why = (f"a {'GPU' if info.gpus else 'Neuron'} node" if info.accelerated
               else f"the other nodes of its node group ({node.node_group}) use EFA")
        return self.finding(
            resource=node.id,
            summary=(
                f"{node.name} ({node.id}, {node.instance_type}) supports up to {info.max_efa_interfaces} EFA "
                f"interfaces but has none ({why}), so its collective traffic falls back to TCP; relaunch it with "
                "EFA interfaces."
            ),
            evidence={
                "instance": node.id,
                "instance_type": node.instance_type,
                "max_efa_interfaces": info.max_efa_interfaces,
                "efa_interfaces": 0,
                "expected_because": "accelerated" if info.accelerated else "node-group",
                "node_group": node.node_group,
                "interfaces": [f"{e.id} ({e.interface_type})" for e in inv.interfaces_of(node)],
            },
        )

    def _optional(self, inv: Inventory, instance_type: str, nodes: list[Instance]) -> Finding:
        labels = [inv.label(n.id) for n in nodes]
        return self.finding(
            resource=instance_type,
            severity=Severity.INFO,
            summary=(
                f"{plural(len(nodes), 'CPU node')} of type {instance_type} ({id_list(labels)}) could use EFA but "
                "have none; that is expected unless they run MPI or NCCL jobs across nodes."
            ),
            evidence={
                "instance_type": instance_type,
                "max_efa_interfaces": inv.type_of(nodes[0]).max_efa_interfaces,
                "instance_count": len(nodes),
                "instances": sample([n.id for n in nodes]),
                "node_groups": sorted({n.node_group or "none" for n in nodes}),
            },
        )
