from __future__ import annotations

from collections import defaultdict

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity

from ._common import id_list, nodes_phrase, plural, sample


class EfaSubnetSpread(Check):
    """All EFA interfaces of the cluster are in one subnet (and so one Availability Zone).

    EFA's OS-bypass traffic is not routable: it does not cross subnets. Nodes whose EFA interfaces sit
    in another subnet fall back to TCP sockets, or make collective operations hang, for the whole job.
    """

    id = "efa-subnet-spread"
    family = "efa"
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSubnets")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        efa = inv.efa_interfaces()
        if not efa:
            raise NotApplicable("the cluster has no EFA interfaces")
        instances_by_subnet: dict[str, set[str]] = defaultdict(set)
        interfaces_by_subnet: dict[str, int] = defaultdict(int)
        for eni in efa:
            instances_by_subnet[eni.subnet_id].add(eni.instance_id or eni.id)
            interfaces_by_subnet[eni.subnet_id] += 1
        if len(instances_by_subnet) == 1:
            return []
        # The subnet most nodes use is where the others belong; ties go to the lowest id (stable output).
        main = min(instances_by_subnet, key=lambda s: (-len(instances_by_subnet[s]), s))
        main_az = inv.subnets[main].availability_zone if main in inv.subnets else "unknown AZ"
        findings = []
        for subnet_id in sorted(instances_by_subnet):
            if subnet_id == main:
                continue
            instances = sorted(instances_by_subnet[subnet_id], key=inv.label)
            az = inv.subnets[subnet_id].availability_zone if subnet_id in inv.subnets else "unknown AZ"
            findings.append(
                self.finding(
                    resource=subnet_id,
                    summary=(
                        f"{nodes_phrase(len(instances))} EFA interfaces in {subnet_id} ({az}): "
                        f"{id_list([inv.label(i) for i in instances])}; "
                        f"the other {plural(len(instances_by_subnet[main]), 'node')} use {main} ({main_az}), and EFA "
                        f"traffic does not cross subnets; relaunch {'it' if len(instances) == 1 else 'them'} in {main}."
                    ),
                    evidence={
                        "subnet": subnet_id,
                        "availability_zone": az,
                        "cluster_subnet": main,
                        "cluster_availability_zone": main_az,
                        "instances": sample(instances),
                        "instance_count": len(instances),
                        "efa_interfaces": interfaces_by_subnet[subnet_id],
                        "subnets": {s: len(i) for s, i in sorted(instances_by_subnet.items())},
                    },
                )
            )
        return findings
