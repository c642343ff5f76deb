from __future__ import annotations

from collections import Counter

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity

NO_GROUP = None


class PlacementGroup(Check):
    """All accelerated (GPU/Neuron) compute nodes are in one placement group, and its strategy is 'cluster'.

    A cluster placement group packs nodes onto the same network spine; nodes outside it (or in a
    spread/partition group) see higher latency and lower bisection bandwidth, which slows every collective.
    """

    id = "placement-group"
    family = "efa"
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribePlacementGroups")

    def run(self, ctx: CheckContext) -> list[Finding]:
        nodes = ctx.inventory.accelerated_nodes()
        if len(nodes) < 2:
            raise NotApplicable("fewer than two accelerated compute nodes")
        counts = Counter(n.placement_group for n in nodes)
        # The group most nodes are in is the cluster's; a named group beats "none" on a tie.
        main = min(counts, key=lambda g: (-counts[g], g is NO_GROUP, g or ""))
        findings = []
        for node in nodes:
            if node.placement_group == main:
                continue
            where = f"in placement group {node.placement_group}" if node.placement_group else "in no placement group"
            expected = f"placement group {main}" if main else "one cluster placement group"
            findings.append(
                self.finding(
                    resource=node.id,
                    summary=(
                        f"{node.name} ({node.id}) is {where} while {counts[main]} other GPU nodes are "
                        f"{'in ' + main if main else 'in none'}; relaunch it in {expected}."
                    ),
                    evidence={
                        "instance": node.id,
                        "placement_group": node.placement_group,
                        "cluster_placement_group": main,
                        "nodes_in_cluster_group": counts[main],
                        "groups": {g or "none": c for g, c in sorted(counts.items(), key=lambda kv: kv[0] or "")},
                    },
                )
            )
        if main is NO_GROUP:
            findings.append(
                self.finding(
                    resource=f"cluster/{ctx.cluster}",
                    summary=(
                        f"{counts[main]} GPU nodes of {ctx.cluster} are in no placement group; launch them in "
                        "one cluster placement group for full-bandwidth, low-latency EFA."
                    ),
                    evidence={"nodes_without_group": counts[main], "groups": {"none": counts[main]}},
                )
            )
            return findings
        findings.extend(self._strategy(ctx, main, counts[main]))
        return findings

    def _strategy(self, ctx: CheckContext, group: str, members: int) -> list[Finding]:
        unverified = f"strategy of placement group {group} (the nodes share it, but is it 'cluster'?)"
        strategy = None
        with ctx.guard(unverified):
            response = ctx.client("ec2").describe_placement_groups(GroupNames=[group])
            strategy = next((g.get("Strategy") for g in response.get("PlacementGroups", [])), None)
            if strategy is None:
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
