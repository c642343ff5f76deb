from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from fmdoctor.engine.check import Check
from fmdoctor.engine.concurrency import all_at_once
from fmdoctor.engine.context import CheckContext, RunStart
from fmdoctor.engine.entities import BUCKET, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.engine.prefetch import EarlyLoad
from fmdoctor.engine.slots import waiting
from fmdoctor.net.classes import PairOutcome, evaluate_towards, interface_classes
from fmdoctor.net.fetch import TOPOLOGY_IAM_ACTIONS
from fmdoctor.net.model import Blocked, Caveat, Endpoint, Flow
from fmdoctor.net.network import Network
from fmdoctor.net.reachability import load_network
from fmdoctor.net.resolve import HTTPS, directory_bucket_zone, s3_endpoint, s3express_endpoint

from ._common import id_list, nodes_phrase
from ._net import (
    as_blocked,
    blocker_evidence,
    by_blocker,
    by_caveat,
    caveat_evidence,
    explain,
    instances_of,
    labels,
    merged_fix,
    note_unverified,
    primary_interfaces,
)

FLOW = Flow("tcp", HTTPS)


def _buckets(locations: Sequence[str]) -> list[str]:
    """The buckets of the checkpoint locations (s3://bucket/...)."""
    return sorted({loc[5:].split("/", 1)[0] for loc in locations if loc.startswith("s3://")})


def _bucket_region(start: RunStart, bucket: str) -> str:
    location = start.client("s3").get_bucket_location(Bucket=bucket).get("LocationConstraint")
    return str(location or "us-east-1")


# GetBucketLocation of each general-purpose checkpoint bucket: named by the settings, so asked before the inventory.
BUCKET_REGION: EarlyLoad[str] = EarlyLoad(
    "s3.bucket-region", _bucket_region, ("s3:GetBucketLocation",),
    lambda start: [b for b in _buckets(start.settings.checkpoints.locations) if not directory_bucket_zone(b)],
    regional=True)


class S3Unreachable(Check):
    """Every cluster node has a network path to S3 on HTTPS: in the cluster's region through a gateway
    endpoint, an interface endpoint, a NAT gateway or an internet gateway (with a public IP), with the
    security groups, network ACLs and routes on the way admitting it; for checkpoint buckets in
    checkpoints.locations that live in another region, a path through NAT or an internet gateway; and for
    S3 Express One Zone directory buckets there (``--x-s3`` names), a path of their own.

    Without it, data loading and checkpoint uploads hang until they time out, often hours into a job. The S3
    guide (docs.aws.amazon.com/AmazonS3/latest/userguide/s3-express-networking.html): directory buckets "use
    Regional and Zonal API endpoints that are different from the standard Amazon S3 endpoints", reached
    through an ``s3express`` gateway endpoint or over the internet, so an S3 gateway endpoint does not serve
    them; GetBucketLocation "is not supported for directory buckets", so their zone comes from the name. A
    gateway endpoint with a custom policy is not verified (fmdoctor.net.policy); replies through network ACLs
    follow fmdoctor.net.replies (a warning when only some clients' ports pass).
    """

    id = "s3-unreachable"
    family = "network"
    concerns = frozenset({NODE, BUCKET})
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules",
                   *TOPOLOGY_IAM_ACTIONS, "s3:GetBucketLocation")
    prefetch = (BUCKET_REGION,)

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        # The buckets' regions need nothing from the network: asked while the topology loads.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fmdoctor-s3-regions") as pool:
            regions = pool.submit(self._bucket_regions, ctx)
            network = load_network(ctx)
            with waiting():
                region_of = regions.result()
        clients = interface_classes(network, primary_interfaces(inv, inv.instances))
        findings: list[Finding] = []
        for target in [s3_endpoint(network, None, ctx.region), *self._bucket_targets(ctx, network, region_of)]:
            outcomes = [o for c in clients for o in evaluate_towards(network, c, target, FLOW)]
            note_unverified(ctx, f"path to {target.label}", [o.result for o in outcomes if o.result.reachable is None])
            blocked = [o for o in outcomes if o.result.reachable is False]
            findings.extend(self._finding(ctx, target, reason, group) for reason, group in by_blocker(blocked))
            findings.extend(self._finding(ctx, target, as_blocked(caveat), group, caveat)
                            for caveat, group in by_caveat(outcomes))
        return _one_per_resource(findings)

    @staticmethod
    def _buckets(ctx: CheckContext | RunStart) -> list[str]:
        return _buckets(ctx.settings.checkpoints.locations)

    def _bucket_regions(self, ctx: CheckContext) -> dict[str, str]:
        """The region of each general-purpose checkpoint bucket, all asked at once; one that could not be read is
        left out (its error is on ``ctx``)."""
        general = [b for b in self._buckets(ctx) if not directory_bucket_zone(b)]

        def region(bucket: str) -> str | None:
            with ctx.guard(f"the region of checkpoint bucket {bucket}, so the path to it"):
                return BUCKET_REGION.get(ctx, bucket)
            return None

        return {b: r for b, r in zip(general, all_at_once(region, general, name="fmdoctor-s3-regions"), strict=True)
                if r is not None}

    def _bucket_targets(self, ctx: CheckContext, network: Network, region_of: dict[str, str]) -> list[Endpoint]:
        """Directory buckets (their own path) and general-purpose buckets of another region."""
        found = []
        for bucket in self._buckets(ctx):
            if directory_bucket_zone(bucket):
                found.append(s3express_endpoint(network, bucket))
            elif bucket in region_of and region_of[bucket] != ctx.region:
                found.append(s3_endpoint(network, bucket, region_of[bucket], f"s3://{bucket}"))
        return found

    def _finding(self, ctx: CheckContext, target: Endpoint, reason: Blocked, outcomes: list[PairOutcome],
                 caveat: Caveat | None = None) -> Finding:
        """A blocked path (critical), or with ``caveat`` a path that drops some replies (warning)."""
        inv = ctx.inventory
        nodes = instances_of(outcomes, "source")
        subnets = sorted({o.source.key[0] for o in outcomes})
        where = f"{id_list(labels(inv, nodes))} in {', '.join(subnets)}"
        if caveat is not None:
            summary = (f"{nodes_phrase(len(nodes))} a path to {target.label} that drops some replies ({where}): "
                       f"{caveat.summary}; {caveat.remedy}.")
            facts = caveat_evidence(caveat, outcomes[0].result)
            fix = merged_fix(as_blocked(c) for o in outcomes for c in o.result.warnings)
        else:
            summary = (f"{nodes_phrase(len(nodes))} no path to {target.label} ({where}): "
                       f"{explain(reason, outcomes, inv)}.")
            facts = blocker_evidence(reason, outcomes[0].result)
            fix = merged_fix(o.result.blocked_by for o in outcomes if o.result.blocked_by)
        return self.finding(
            resource=reason.resource,
            severity=Severity.WARNING if caveat is not None else Severity.CRITICAL,
            summary=summary,
            evidence={
                "destination": target.label,
                "region": target.bucket_region,
                "service": target.service,
                "target": target.query or "s3",
                **facts,
                "node_count": len(nodes),
                "example_node": nodes[0] if nodes else "",
                "nodes": labels(inv, nodes),
                "subnets": subnets,
                "route_table": reason.evidence.get("route_table"),
                "exits": reason.evidence.get("exits", {}),
                "fix": fix,
            },
        )


def _one_per_resource(findings: list[Finding]) -> list[Finding]:
    """One finding per blocking resource (a finding's id is check/resource): a route table that blocks S3 and
    an S3 Express bucket alike is one finding naming both destinations, at the worse severity."""
    merged: dict[str, Finding] = {}
    for finding in sorted(findings, key=lambda f: -f.severity.rank):
        first = merged.get(finding.resource)
        if first is None:
            merged[finding.resource] = finding
            continue
        also = [*first.evidence.get("also_unreachable", []), finding.evidence["destination"]]
        merged[finding.resource] = first.model_copy(update={
            "evidence": {**first.evidence, "also_unreachable": also},
            "summary": f"{first.summary} The same holds for {', '.join(also)}.",
        })
    return list(merged.values())
