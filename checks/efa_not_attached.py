from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity


class EfaNotAttached(Check):
    """Every compute node whose instance type supports EFA has at least one EFA interface.

    Without one, NCCL/libfabric fall back to TCP over the ENA interface: collectives run many times
    slower and a synchronous job runs at that node's pace.
    """

    id = "efa-not-attached"
    family = "efa"
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        nodes = [i for i in inv.compute_nodes() if inv.type_of(i).efa_supported]
        unknown = sorted({i.instance_type for i in inv.compute_nodes() if i.instance_type not in inv.instance_types})
        if unknown:
            ctx.unverified(f"EFA support of instance types {', '.join(unknown)}", "InstanceTypeUnknown")
        if not nodes:
            raise NotApplicable("no compute node has an EFA-capable instance type")
        findings = []
        for node in nodes:
            interfaces = inv.interfaces_of(node)
            if any(e.is_efa for e in interfaces):
                continue
            info = inv.type_of(node)
            findings.append(
                self.finding(
                    resource=node.id,
                    summary=(
                        f"{node.name} ({node.id}, {node.instance_type}) supports up to {info.max_efa_interfaces} "
                        "EFA interfaces but has none, so its collective traffic falls back to TCP; relaunch it "
                        "with EFA interfaces."
                    ),
                    evidence={
                        "instance": node.id,
                        "instance_type": node.instance_type,
                        "max_efa_interfaces": info.max_efa_interfaces,
                        "efa_interfaces": 0,
                        "interfaces": [f"{e.id} ({e.interface_type})" for e in interfaces],
                    },
                )
            )
        return findings
