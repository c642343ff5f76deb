from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.spot.sources import spot_facts

from ._spot import SPOT_IAM, interruptions


class SpotInterruption(Check):
    """No Spot instance of the cluster has a current interruption notice: its Spot request is not marked for
    termination, stop or hibernation, the SQS queue (spot.queue_url, or --spot-queue) holds no current
    interruption warning for it, and, on a node, IMDS spot/instance-action is empty.

    EC2 gives two minutes' warning. A synchronous training job loses the node and, with it, every step since
    its last checkpoint unless it saves and drains now.
    """

    id = "spot-interruption"
    family = "spot"
    severity = Severity.CRITICAL
    iam_actions = SPOT_IAM
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = spot_facts(ctx)
        return [
            self.finding(
                resource=item.instance_id,
                summary=(
                    f"{item.sentence(ctx.now)}: checkpoint now, drain it from the scheduler and let the job "
                    "resume elsewhere."
                ),
                evidence={**item.evidence(ctx, facts), "ignored_notices": dict(facts.ignored)},
            )
            for item in interruptions(ctx, facts)
        ]
