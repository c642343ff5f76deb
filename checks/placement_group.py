from __future__ import annotations

from collections import Counter, defaultdict

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext, RunStart
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.inventory import Instance
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.engine.prefetch import EarlyLoad

from ._common import id_list, plural, sample

NO_GROUP = None
WHOLE_CLUSTER = ""  # nodes no launch tag places in a node group are judged together, as the cluster's


def _strategies(start: RunStart, _: str) -> dict[str, str | None]:
    """Every placement group of the account and region -> its strategy: one DescribePlacementGroups without
    filters "describes ... all of your placement groups" and has no pagination (EC2 API reference,
    docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribePlacementGroups.html), so it needs no inventory."""
    response = start.client("ec2").describe_placement_groups()
    return {g["GroupName"]: g.get("Strategy") for g in response.get("PlacementGroups", []) if g.get("GroupName")}


PLACEMENT_GROUPS: EarlyLoad[dict[str, str | None]] = EarlyLoad("ec2.placement-groups", _strategies,
                                                               ("ec2:DescribePlacementGroups",), regional=True)


def _scope(node_group: str) -> str:
    return f"node group {node_group}" if node_group else "the cluster"


class PlacementGroup(Check):
    """Within each node group (EKS node group, ParallelCluster compute resource, PCS node group, Auto Scaling
    group or launch template; untagged nodes together), the accelerated (GPU/Neuron) nodes share one placement
    group and its strategy is 'cluster'. Nodes in a Capacity Block are not judged.

    The EC2 guide (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html): "It is not an absolute
    requirement to launch your EFA-enabled instances into a cluster placement group. However, we do recommend
    running your EFA-enabled instances in a cluster placement group". So a node outside the group its peers
    use, or a group of nodes in none, is a warning, and one cluster placement group per node group is normal.
    Capacity Blocks (docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html): "Instances that
    run inside a Capacity Block are automatically placed close together inside Amazon EC2 UltraClusters", so
    instances with InstanceLifecycle 'capacity-block' (or a CapacityBlockId) need no placement group.
    """

    id = "placement-group"
    family = "efa"
    concerns = frozenset({NODE})
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribePlacementGroups")
    prefetch = (PLACEMENT_GROUPS,)

    def run(self, ctx: CheckContext) -> list[Finding]:
        accelerated = ctx.inventory.accelerated_nodes()
        nodes = [n for n in accelerated if not n.in_capacity_block]
        by_group: dict[str, list[Instance]] = defaultdict(list)
        for node in nodes:
            by_group[node.node_group or WHOLE_CLUSTER].append(node)
        judged = {name: members for name, members in by_group.items() if len(members) >= 2}
        if not judged:
            in_blocks = len(accelerated) - len(nodes)
            raise NotApplicable("no node group has two accelerated nodes outside Capacity Blocks"
                                + (f" ({plural(in_blocks, 'node')} in Capacity Blocks, which EC2 places in "
                                   "UltraClusters itself)" if in_blocks else ""))
        findings = []
        strategies_to_check: dict[str, int] = {}
        for name, members in sorted(judged.items()):
            counts = Counter(n.placement_group for n in members)
            # The group most nodes are in is the node group's; a named group beats "none" on a tie.
            main = min(counts, key=lambda g: (-counts[g], g is NO_GROUP, g or ""))
            findings.extend(self._outliers(name, members, main, counts))
            if main is NO_GROUP:
                findings.append(self._no_group(ctx, name, members))
            else:
                strategies_to_check[main] = strategies_to_check.get(main, 0) + counts[main]
        for group, node_count in sorted(strategies_to_check.items()):
            findings.extend(self._strategy(ctx, group, node_count))
        return findings

    def _outliers(self, node_group: str, members: list[Instance], main: str | None,
                  counts: Counter[str | None]) -> list[Finding]:
        findings = []
        for node in members:
            if node.placement_group == main:
                continue
            where = f"in placement group {node.placement_group}" if node.placement_group else "in no placement group"
            expected = f"placement group {main}" if main else "one cluster placement group"
            findings.append(self.finding(
                resource=node.id,
                summary=(
                    f"{node.name} ({node.id}) is {where} while {counts[main]} other GPU nodes of {_scope(node_group)} "
                    f"are {'in ' + main if main else 'in none'}; relaunch it in {expected}."
                ),
                evidence={
                    "instance": node.id,
                    "placement_group": node.placement_group,
                    "cluster_placement_group": main,
                    "nodes_in_cluster_group": counts[main],
                    "node_group": node_group or None,
                    "scope": _scope(node_group),
                    "groups": {g or "none": c for g, c in sorted(counts.items(), key=lambda kv: kv[0] or "")},
                },
            ))
        return findings

    def _no_group(self, ctx: CheckContext, node_group: str, members: list[Instance]) -> Finding:
        ids = [n.id for n in members if n.placement_group is NO_GROUP]
        whole = node_group == WHOLE_CLUSTER
        scope = f"cluster {ctx.cluster}" if whole else _scope(node_group)
        return self.finding(
            resource=f"cluster/{ctx.cluster}" if whole else f"node-group/{node_group}",
            summary=(
                f"{plural(len(ids), 'GPU node')} of {scope} ({id_list([ctx.inventory.label(i) for i in ids])}) are "
                "in no placement group; AWS recommends one cluster placement group for full-bandwidth, low-latency "
                "EFA."
            ),
            evidence={"nodes_without_group": len(ids), "groups": {"none": len(ids)}, "node_group": node_group or None,
                      "scope": scope, "instances": sample(ids)},
        )

    def _strategy(self, ctx: CheckContext, group: str, members: int) -> list[Finding]:
        unverified = f"strategy of placement group {group} (the nodes share it, but is it 'cluster'?)"
        strategy = None
        with ctx.guard(unverified):
            strategy = PLACEMENT_GROUPS.get(ctx).get(group)
            if strategy is None:  # a group shared from another account is not among "your" groups
                ctx.unverified(unverified, "PlacementGroupNotFound", f"DescribePlacementGroups returned no {group}")
        if strategy in (None, "cluster"):
            return []
        return [
            self.finding(
                resource=group,
                summary=(
                    f"Placement group {group} ({members} GPU nodes) uses the '{strategy}' strategy, which "
                    "spreads nodes apart; GPU training wants a 'cluster' placement group."
                ),
                evidence={"placement_group": group, "strategy": strategy, "members": members},
            )
        ]
