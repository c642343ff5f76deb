from __future__ import annotations

from collections import defaultdict

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net.security_groups import all_traffic_group_rule

from ._common import id_list, plural, sample


class EfaSgSelfReference(Check):
    """Every EFA interface's security groups allow all traffic in from, and out to, a group that every
    EFA interface of the cluster is in (normally the EFA group itself).

    EFA's OS-bypass (SRD) traffic is admitted only by such all-traffic, group-referencing rules in both
    directions: a TCP- or port-limited rule, a one-way rule or a CIDR rule (the default 0.0.0.0/0 egress
    included) leaves NCCL hanging or the HyperPod EFA health check failing.
    """

    id = "efa-sg-self-reference"
    family = "efa"
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        efa = inv.efa_interfaces()
        if not efa:
            raise NotApplicable("the cluster has no EFA interfaces")
        shared_groups = set.intersection(*(set(e.security_group_ids) for e in efa))
        by_group_set = defaultdict(list)
        for eni in efa:
            by_group_set[eni.security_group_ids].append(eni)

        findings = []
        for group_ids, enis in sorted(by_group_set.items()):
            groups = [inv.security_groups[g] for g in group_ids if g in inv.security_groups]
            missing_groups = [g for g in group_ids if g not in inv.security_groups]
            if missing_groups:
                ctx.unverified(f"rules of security groups {', '.join(missing_groups)}", "GroupNotFound")
                continue
            missing = [
                direction
                for direction, egress in (("ingress", False), ("egress", True))
                if all_traffic_group_rule(groups, egress, shared_groups) is None
            ]
            if not missing:
                continue
            # The fix belongs on a group every EFA interface carries, so one rule pair covers all peers.
            target = next((g for g in group_ids if g in shared_groups), group_ids[0])
            instances = sorted({e.instance_id for e in enis if e.instance_id}, key=inv.label)
            egress_flags = {d == "egress" for d in missing}
            considered = [r.describe() for g in groups for r in g.rules if r.egress in egress_flags]
            direction_text = " and ".join(
                {"ingress": f"inbound from {target}", "egress": f"outbound to {target}"}[d] for d in missing
            )
            findings.append(
                self.finding(
                    resource=target,
                    summary=(
                        f"Security group {target} does not allow all traffic {direction_text}, so EFA traffic "
                        f"between {plural(len(instances), 'node')} ({id_list([inv.label(i) for i in instances])}) is "
                        f"blocked; add an "
                        f"all-traffic rule {direction_text} (self-referencing)."
                    ),
                    evidence={
                        "missing_directions": missing,
                        "rules_considered": considered[:20],
                        "required_rule": "protocol -1 (all traffic), all ports, peer = referenced security group",
                        "security_group": target,
                        "security_group_name": inv.security_groups[target].name,
                        "interface_security_groups": list(group_ids),
                        "groups_shared_by_all_efa_interfaces": sorted(shared_groups),
                        "instance_count": len(instances),
                        "instances": sample(instances),
                        "efa_interfaces": len(enis),
                        "efa_interface_sample": sample([e.id for e in enis]),
                        "fix": [
                            {"action": f"authorize-security-group-{d}", "group_id": target, "ip_protocol": "-1",
                             "peer_group_id": target}
                            for d in missing
                        ],
                    },
                )
            )
        return findings
