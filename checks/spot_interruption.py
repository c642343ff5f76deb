from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.spot.sources import QUEUE_READ, SCHEDULED_EVENTS, spot_facts

from ._spot import SPOT_IAM, interruptions


class SpotInterruption(Check):
    """No node of the cluster has a current interruption notice: no Spot request marked for termination, stop
    or hibernation, no interruption warning (Spot, interruptible Capacity Reservation) or AWS Health scheduled
    change in the SQS queue (spot.queue_url, or --spot-queue), no upcoming EC2 scheduled event
    (DescribeInstanceStatus), and, on a node, nothing in IMDS spot/instance-action or
    events/maintenance/scheduled.

    EC2 gives two minutes' warning before a Spot or interruptible-reservation interruption, days before a
    scheduled retirement or maintenance. A synchronous training job loses the node and, with it, every step
    since its last checkpoint unless it saves and drains first. Scheduled events are warnings until their
    window is an hour away. Event shapes follow the EC2 user guide and aws-node-termination-handler's reader
    (pkg/monitor/sqsevent).
    """

    id = "spot-interruption"
    family = "spot"
    concerns = frozenset({NODE, JOB})
    severity = Severity.CRITICAL
    iam_actions = SPOT_IAM
    prefetch = (QUEUE_READ, SCHEDULED_EVENTS)
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = spot_facts(ctx)
        return [
            self.finding(
                resource=item.instance_id,
                summary=(
                    f"{item.sentence(ctx.now)}: checkpoint now, drain it from the scheduler and let the job "
                    "resume elsewhere." if item.imminent else
                    f"{item.sentence(ctx.now)}: plan the move (checkpoint, drain, replace the node) before then."
                ),
                evidence={**item.evidence(ctx, facts), "ignored_notices": dict(facts.ignored)},
                severity=Severity.CRITICAL if item.imminent else Severity.WARNING,
            )
            for item in interruptions(ctx, facts)
        ]
