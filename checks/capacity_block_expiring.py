from __future__ import annotations

from datetime import timedelta

from fmdoctor.checkpoints.facts import CHECKPOINT_FACTS
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check, NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.inventory import Instance
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.spot.capacity import CAPACITY_BLOCK, EXTEND_UNTIL, CapacityBlock, describe_capacity_blocks
from fmdoctor.spot.risk import work_at_risk
from fmdoctor.spot.sources import QUEUE_READ, queue_read

from ._checkpoint import CHECKPOINT_IAM
from ._common import id_list, plural
from ._spot import newest_usable_checkpoint


class CapacityBlockExpiring(Check):
    """No node of the cluster runs in a Capacity Block that ends within capacity_blocks.expiry_window
    (EndDate from DescribeCapacityReservations, or EventBridge's 'Capacity Block Reservation Expiration
    Warning' in the SQS queue); where one does, the finding says when EC2 begins terminating its instances
    (30 minutes before the end) and how much work that throws away, counted from the newest usable checkpoint
    exactly as spot-interruption-unprotected counts it: critical when that is more than checkpoints.max_age
    and the job's next save cannot be counted on first, else a warning to extend the block or move the job.

    A Capacity Block ends on its date whatever the job is doing; the warning comes 40 minutes before the end
    (EC2 user guide, capacity-blocks-monitor.html), and an extension can be bought until an hour before it
    (capacity-blocks-extend.html).
    """

    id = "capacity-block-expiring"
    family = "capacity"
    concerns = frozenset({NODE, JOB})
    severity = Severity.WARNING
    iam_actions = tuple(dict.fromkeys(("ec2:DescribeInstances", "ec2:DescribeCapacityReservations",
                                       "sqs:GetQueueAttributes", "sqs:ReceiveMessage") + CHECKPOINT_IAM))
    prefetch = (QUEUE_READ, CHECKPOINT_FACTS)  # the Capacity Block warnings and the newest checkpoint: no inventory

    def run(self, ctx: CheckContext) -> list[Finding]:
        reserved = [i for i in ctx.inventory.instances
                    if i.lifecycle == CAPACITY_BLOCK or i.capacity_reservation_id]
        if not reserved:
            raise NotApplicable(f"no node of cluster {ctx.cluster} runs in a Capacity Block")
        blocks = self._blocks(ctx, reserved)
        if not blocks:
            raise NotApplicable(f"the nodes of cluster {ctx.cluster} run in On-Demand Capacity Reservations, "
                                "which do not end on a schedule, not in Capacity Blocks")
        window = ctx.settings.capacity_blocks.expiry_window
        findings = []
        for block, nodes in blocks:
            ends, begins = block.ends, block.terminations_begin
            if ends is None or begins is None:
                ctx.unverified(f"when Capacity Block {block.reservation_id} ends", "NoEndDate",
                               "DescribeCapacityReservations gave no EndDate and no expiration warning arrived")
                continue
            if ends - ctx.now > window and block.warning is None:
                continue
            findings.append(self._finding(ctx, block, nodes, window))
        return findings

    def _blocks(self, ctx: CheckContext, reserved: list[Instance]) -> list[tuple[CapacityBlock, list[Instance]]]:
        by_id: dict[str, list[Instance]] = {}
        for instance in reserved:
            if instance.capacity_reservation_id:
                by_id.setdefault(instance.capacity_reservation_id, []).append(instance)
            else:
                ctx.unverified(f"which Capacity Block {instance.id} runs in", "NoCapacityReservationId",
                               "DescribeInstances shows the node as capacity-block but names no reservation")
        queue = queue_read(ctx)
        warnings = {w.reservation_id: w for w in (queue.capacity_warnings if queue else [])}
        if queue is not None:
            queue.gaps.report(ctx)
        described: dict[str, CapacityBlock | None] | None = None
        with ctx.guard(f"the end dates of {plural(len(by_id), 'Capacity Reservation')} of cluster {ctx.cluster}"):
            described = describe_capacity_blocks(ctx.client("ec2"), by_id)
        if described is None and not warnings:
            raise Unverified(f"the Capacity Blocks of cluster {ctx.cluster} could not be read")
        found = []
        for reservation_id, nodes in sorted(by_id.items()):
            block = (described or {}).get(reservation_id)
            warning = warnings.get(reservation_id)
            if block is None and warning is None:
                if described is not None or not any(n.lifecycle == CAPACITY_BLOCK for n in nodes):
                    continue  # an On-Demand Capacity Reservation
                block = CapacityBlock(reservation_id, None)
            elif block is None:
                block = CapacityBlock(reservation_id, None, warning=warning)
            elif warning is not None:
                block = block.with_warning(warning)
            found.append((block, nodes))
        return found

    def _finding(self, ctx: CheckContext, block: CapacityBlock, nodes: list[Instance],
                 window: timedelta) -> Finding:
        ends, begins = block.ends, block.terminations_begin
        assert ends is not None and begins is not None
        names = [ctx.inventory.label(n.id) for n in nodes]
        stamp = ends.isoformat(timespec="minutes")
        when = f"ends at {stamp} (in {format_duration(ends - ctx.now)})" if ends > ctx.now else f"ended at {stamp}"
        starts = ("EC2 is terminating its instances now" if begins <= ctx.now else
                  f"EC2 begins terminating its instances at {begins.isoformat(timespec='minutes')}")
        newest = newest_usable_checkpoint(ctx)
        evidence: dict[str, object] = {
            "capacity_reservation_id": block.reservation_id,
            "end_date": ends.isoformat(),
            "terminations_begin": begins.isoformat(),
            "minutes_left": max(int((begins - ctx.now).total_seconds() // 60), 0),
            "expiry_window": format_duration(window),
            "nodes": [n.id for n in nodes],
            "instance_type": block.instance_type or None,
            "expiration_warning": ({"noticed_at": block.warning.noticed_at.isoformat(),
                                    "reference": block.warning.reference} if block.warning else None),
            "max_age": format_duration(ctx.settings.checkpoints.max_age),
        }
        severity = Severity.WARNING
        if newest.unverified is not None:
            ctx.unverified(f"the work at risk when Capacity Block {block.reservation_id} ends", *newest.unverified)
            risk_sentence = "whether its work is checkpointed could not be verified"
            evidence.update({"minutes_lost": None, "checkpoint": None})
        else:
            risk = work_at_risk(newest.best, newest.where, begins, ctx.now, ctx.settings.checkpoints.max_age)
            risk_sentence = risk.by_then()
            evidence.update(risk.evidence())
            severity = Severity.CRITICAL if risk.unprotected else Severity.WARNING
        extend = ("extend the block (aws ec2 describe-capacity-block-extension-offerings) or " if
                  ends - ctx.now > EXTEND_UNTIL else "")
        return self.finding(
            resource=block.reservation_id,
            summary=(f"Capacity Block {block.reservation_id} of {plural(len(nodes), 'node')} "
                     f"({id_list(names)}) {when}; {starts}; {risk_sentence}: {extend}checkpoint and move the job "
                     "before then."),
            evidence=evidence,
            severity=severity,
        )
