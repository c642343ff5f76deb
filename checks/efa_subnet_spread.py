from __future__ import annotations

from collections import defaultdict

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net import efa as efa_model

from ._common import id_list, nodes_phrase, plural, sample


class EfaSubnetSpread(Check):
    """All EFA interfaces of the cluster are in one Availability Zone of one VPC (any number of subnets there).

    The EC2 EFA guide's limitations (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html): "EFA traffic can't
    cross Availability Zones or VPCs." ParallelCluster refuses an EFA queue whose subnets span zones
    (EfaMultiAzValidator: "EFA is not supported across Availability zones") and EKS limits EFA-only interfaces
    "to interfaces within the same Availability Zone". Nodes whose EFA interfaces are in another zone or VPC
    fall back to TCP sockets, or make collective operations hang, for the whole job. Several subnets in one
    zone are a supported layout, not a finding; zones are compared by their ids (DescribeSubnets).
    """

    id = "efa-subnet-spread"
    family = "efa"
    concerns = frozenset({NODE})
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSubnets")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        efa = inv.efa_interfaces()
        if not efa:
            raise NotApplicable("the cluster has no EFA interfaces")
        subnets = inv.subnets
        unknown = sorted({e.subnet_id for e in efa if not getattr(subnets.get(e.subnet_id), "zone", "")})
        if unknown:
            ctx.unverified(f"Availability Zone of the EFA interfaces in {', '.join(unknown)}", "SubnetNotFound",
                           "DescribeSubnets did not return these subnets")
        placed = [e for e in efa if e.subnet_id not in unknown]
        instances: dict[tuple[str, str], set[str]] = defaultdict(set)  # (VPC, zone) -> instances
        by_subnet: dict[str, set[str]] = defaultdict(set)
        interfaces: dict[str, int] = defaultdict(int)
        for eni in placed:
            subnet = subnets[eni.subnet_id]
            instances[(subnet.vpc_id, subnet.zone)].add(eni.instance_id or eni.id)
            by_subnet[eni.subnet_id].add(eni.instance_id or eni.id)
            interfaces[eni.subnet_id] += 1
        if len(instances) <= 1:
            return []
        # The zone most nodes use is where the others belong; ties go to the lowest (VPC, zone) (stable output).
        main = min(instances, key=lambda z: (-len(instances[z]), z))
        main_subnets = sorted(s for s in by_subnet if (subnets[s].vpc_id, subnets[s].zone) == main)
        findings = []
        for subnet_id in sorted(by_subnet):
            if subnet_id in main_subnets:
                continue
            crosses = efa_model.boundary(subnets, main_subnets[0], subnet_id)
            nodes = sorted(by_subnet[subnet_id], key=inv.label)
            where = efa_model.zone_label(subnets, subnet_id)
            main_where = efa_model.zone_label(subnets, main_subnets[0])
            boundary = f"VPC {subnets[subnet_id].vpc_id}" if crosses == efa_model.CROSS_VPC else where
            findings.append(self.finding(
                resource=subnet_id,
                summary=(
                    f"{nodes_phrase(len(nodes))} EFA interfaces in {subnet_id}, in {boundary}: "
                    f"{id_list([inv.label(i) for i in nodes])}; the other {plural(len(instances[main]), 'node')} are "
                    f"in {main_where} of {main[0]}, and EFA traffic can't cross Availability Zones or VPCs; relaunch "
                    f"{'it' if len(nodes) == 1 else 'them'} in a subnet of {main_where}: {', '.join(main_subnets)}."
                ),
                evidence={
                    "subnet": subnet_id,
                    "availability_zone": subnets[subnet_id].availability_zone,
                    "availability_zone_id": subnets[subnet_id].availability_zone_id,
                    "vpc": subnets[subnet_id].vpc_id,
                    "crosses": crosses,
                    "cluster_subnet": main_subnets[0],
                    "cluster_subnets": main_subnets,
                    "cluster_availability_zone": subnets[main_subnets[0]].availability_zone,
                    "cluster_availability_zone_id": subnets[main_subnets[0]].availability_zone_id,
                    "cluster_vpc": main[0],
                    "instances": sample(nodes),
                    "instance_count": len(nodes),
                    "efa_interfaces": interfaces[subnet_id],
                    "subnets": {s: len(i) for s, i in sorted(by_subnet.items())},
                },
            ))
        return findings
