from __future__ import annotations

from datetime import timedelta

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.spot.notices import REBALANCE
from fmdoctor.spot.sources import QUEUE_READ, SCHEDULED_EVENTS, spot_facts

from ._spot import SPOT_IAM, label


class SpotRebalance(Check):
    """No Spot instance of the cluster has a current rebalance recommendation, in the SQS queue or, on a
    node, in IMDS events/recommendations/rebalance.

    A rebalance recommendation comes before the two-minute warning, when EC2 sees the instance's capacity at
    elevated risk: the time to checkpoint and bring up a replacement calmly.
    """

    id = "spot-rebalance"
    family = "spot"
    concerns = frozenset({NODE})
    severity = Severity.WARNING
    iam_actions = SPOT_IAM
    prefetch = (QUEUE_READ, SCHEDULED_EVENTS)
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = spot_facts(ctx, spot_only=True)
        findings = []
        for instance_id, notices in sorted(facts.of_kind(REBALANCE).items()):
            first = min(notices, key=lambda n: n.noticed_at)
            since = first.noticed_at.isoformat(timespec="seconds")
            age = max(ctx.now - first.noticed_at, timedelta(0))
            findings.append(
                self.finding(
                    resource=instance_id,
                    summary=(
                        f"{label(ctx, instance_id)} has had a Spot rebalance recommendation since {since} "
                        f"({format_duration(age)} ago): its capacity is at elevated risk of interruption; "
                        "checkpoint soon and move its work to a replacement node."
                    ),
                    evidence={
                        "instance": instance_id,
                        "noticed_at": first.noticed_at.isoformat(),
                        "age": format_duration(age),
                        "notices": [n.to_evidence(ctx.now) for n in notices],
                        "sources_read": list(facts.sources),
                    },
                )
            )
        return findings
