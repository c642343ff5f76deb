from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity


class EfaMissingInterfaces(Check):
    """Every node that uses EFA has as many EFA interfaces as its instance type supports.

    A p5.48xlarge gets its 3,200 Gbps only with all 32; with 4 it has an eighth of the bandwidth, and
    all-reduce time grows accordingly. (Nodes with no EFA at all are ``efa-not-attached``.)
    """

    id = "efa-missing-interfaces"
    family = "efa"
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        findings = []
        checked = 0
        for node in inv.compute_nodes():
            info = inv.type_of(node)
            have = sum(1 for e in inv.interfaces_of(node) if e.is_efa)
            if have == 0 or not info.max_efa_interfaces:
                continue
            checked += 1
            if have >= info.max_efa_interfaces:
                continue
            share = have / info.max_efa_interfaces
            findings.append(
                self.finding(
                    resource=node.id,
                    summary=(
                        f"{node.name} ({node.id}, {node.instance_type}) has {have} of its "
                        f"{info.max_efa_interfaces} EFA interfaces ({share:.0%} of its EFA bandwidth); "
                        "add the missing interfaces at next launch."
                    ),
                    evidence={
                        "instance": node.id,
                        "instance_type": node.instance_type,
                        "efa_interfaces": have,
                        "max_efa_interfaces": info.max_efa_interfaces,
                        "network_cards_used": sorted(
                            {e.network_card_index or 0 for e in inv.interfaces_of(node) if e.is_efa}
                        ),
                    },
                )
            )
        if not checked:
            raise NotApplicable("no compute node has EFA interfaces")
        return findings
