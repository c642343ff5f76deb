from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net.classes import PairOutcome, evaluate_towards, interface_classes
from fmdoctor.net.fetch import TOPOLOGY_IAM_ACTIONS
from fmdoctor.net.model import Blocked, Endpoint, Flow
from fmdoctor.net.network import Network
from fmdoctor.net.reachability import load_network
from fmdoctor.net.resolve import HTTPS, s3_endpoint

from ._common import id_list, nodes_phrase
from ._net import (
    blocker_evidence,
    by_blocker,
    explain,
    instances_of,
    labels,
    merged_fix,
    note_unverified,
    primary_interfaces,
)

FLOW = Flow("tcp", HTTPS)


class S3Unreachable(Check):
    """Every cluster node has a network path to S3 on HTTPS: in the cluster's region through a gateway
    endpoint, an interface endpoint, a NAT gateway or an internet gateway (with a public IP), with the
    security groups, network ACLs and routes on the way admitting it; and, for checkpoint buckets in
    checkpoints.locations that live in another region, a path through NAT or an internet gateway.

    Without it, data loading and checkpoint uploads hang until they time out, often hours into a job.
    """

    id = "s3-unreachable"
    family = "network"
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules",
                   *TOPOLOGY_IAM_ACTIONS, "s3:GetBucketLocation")

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        network = load_network(ctx)
        clients = interface_classes(network, primary_interfaces(inv, inv.instances))
        findings = []
        for target in [s3_endpoint(network, None, ctx.region), *self._other_region_buckets(ctx, network)]:
            outcomes = [o for c in clients for o in evaluate_towards(network, c, target, FLOW)]
            note_unverified(ctx, "path to S3", [o.result for o in outcomes if o.result.reachable is None])
            blocked = [o for o in outcomes if o.result.reachable is False]
            findings.extend(self._finding(ctx, target, reason, group) for reason, group in by_blocker(blocked))
        return findings

    def _other_region_buckets(self, ctx: CheckContext, network: Network) -> list[Endpoint]:
        buckets = sorted({loc[5:].split("/", 1)[0] for loc in ctx.settings.checkpoints.locations
                          if loc.startswith("s3://")})
        found = []
        for bucket in buckets:
            with ctx.guard(f"the region of checkpoint bucket {bucket}, so the path to it"):
                location = ctx.client("s3").get_bucket_location(Bucket=bucket).get("LocationConstraint")
                region = location or "us-east-1"
                if region != ctx.region:
                    found.append(s3_endpoint(network, bucket, region, f"s3://{bucket}"))
        return found

    def _finding(self, ctx: CheckContext, target: Endpoint, reason: Blocked, outcomes: list[PairOutcome]) -> Finding:
        inv = ctx.inventory
        nodes = instances_of(outcomes, "source")
        subnets = sorted({o.source.key[0] for o in outcomes})
        return self.finding(
            resource=reason.resource,
            summary=(
                f"{nodes_phrase(len(nodes))} no path to {target.label} ({id_list(labels(inv, nodes))} in "
                f"{', '.join(subnets)}): {explain(reason, outcomes, inv)}."
            ),
            evidence={
                "destination": target.label,
                "region": target.bucket_region,
                **blocker_evidence(reason, outcomes[0].result),
                "node_count": len(nodes),
                "example_node": nodes[0] if nodes else "",
                "nodes": labels(inv, nodes),
                "subnets": subnets,
                "route_table": reason.evidence.get("route_table"),
                "exits": reason.evidence.get("exits", {}),
                "fix": merged_fix(o.result.blocked_by for o in outcomes if o.result.blocked_by),
            },
        )
