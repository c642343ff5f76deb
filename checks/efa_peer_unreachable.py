from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE, SECURITY_GROUP
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net.classes import PairOutcome, evaluate_efa_classes
from fmdoctor.net.model import Blocked, Flow
from fmdoctor.net.network import ClassKey, Network
from fmdoctor.net.topology import Topology

from ._common import id_list, plural, sample
from ._net import blocker_evidence, by_blocker, efa_classes, explain, instances_of, labels, merged_fix

EFA = Flow("-1", efa=True)


class EfaPeerUnreachable(Check):
    """Every pair of EFA interfaces in one Availability Zone and VPC, in the same subnet or not, can exchange
    all traffic both ways: the sender's groups have an all-traffic outbound rule referencing a group the
    receiver is in, and the receiver's an all-traffic inbound rule referencing a group of the sender. Pairs
    across zones or VPCs are efa-subnet-spread's finding.

    The rule follows the EC2 EFA guide (docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-efa.html: "the EFA
    must be a member of a security group that allows all inbound and outbound traffic to and from the security
    group itself") and its limitations (efa.html: "EFA traffic can't cross Availability Zones or VPCs"), with the
    model efa-sg-self-reference uses (fmdoctor.net.efa). Evaluated per equivalence class (subnet, security
    groups), and classes with the same groups by block (fmdoctor.net.classes.evaluate_efa_classes), so
    thousands of nodes cost as much as a few. One blocked pair is enough to hang an all-reduce.
    """

    id = "efa-peer-unreachable"
    family = "efa"
    concerns = frozenset({NODE, SECURITY_GROUP})
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules",
                   "ec2:DescribeSubnets")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        efa = inv.efa_interfaces()
        if not efa:
            raise NotApplicable("the cluster has no EFA interfaces")
        # EFA is not routed and its addresses are not IP addresses: the inventory's groups and subnets decide.
        network = Network.build(inv, Topology(region=ctx.region))
        classes = efa_classes(ctx, network, efa)
        verdicts = evaluate_efa_classes(network, classes, EFA)  # the pairs fmdoctor.net.efa.needs_pair names
        blocked = verdicts.blocked_outcomes()
        if not blocked:
            return []
        split = verdicts.islands()
        return [self._finding(ctx, reason, outcomes, split) for reason, outcomes in by_blocker(blocked)]

    def _finding(self, ctx: CheckContext, reason: Blocked, outcomes: list[PairOutcome],
                 split: list[list[ClassKey]]) -> Finding:
        inv = ctx.inventory
        senders = instances_of(outcomes, "source")
        receivers = instances_of(outcomes, "destination")
        nodes = sorted({*senders, *receivers})
        pairs = sorted({(o.source.endpoint.label, o.destination.endpoint.label) for o in outcomes})
        direction = "outbound" if reason.component == "sg-egress" else "inbound"
        return self.finding(
            resource=reason.resource,
            summary=(
                f"EFA traffic between {plural(len(nodes), 'node')} ({id_list(labels(inv, nodes))}) is blocked: "
                f"{explain(reason, outcomes, inv)}."
            ),
            evidence={
                "security_group": reason.resource,
                "missing_direction": direction,
                **blocker_evidence(reason, outcomes[0].result),
                "node_count": len(nodes),
                "nodes": labels(inv, nodes),
                "class_pairs_blocked": len(pairs),
                "class_pairs": sample([f"{a} -> {b}" for a, b in pairs], 5),
                "islands": len(split),
                "rules_considered": reason.evidence.get("rules_considered", []),
                "fix": merged_fix(o.blocked_by for o in outcomes if o.blocked_by),
            },
        )
