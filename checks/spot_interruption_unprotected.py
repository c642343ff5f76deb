from __future__ import annotations

from fmdoctor.checkpoints.facts import CHECKPOINT_FACTS
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.spot.risk import work_at_risk
from fmdoctor.spot.sources import QUEUE_READ, SCHEDULED_EVENTS, spot_facts

from ._checkpoint import CHECKPOINT_IAM
from ._spot import SPOT_IAM, interruptions, newest_usable_checkpoint


class SpotInterruptionUnprotected(Check):
    """No node about to be interrupted (Spot, interruptible Capacity Reservation, EC2 scheduled event) would
    lose more work than the allowed checkpoint interval: at its interruption time, the newest usable
    checkpoint (the one a restart would load; an incomplete newest one does not count) is younger than
    checkpoints.max_age, or the job's next regular save is due before it.

    The warning is the last chance to save: this names the work, in minutes, that the interruption would throw
    away if the job does not checkpoint now, and which proof made that checkpoint usable. Counted past a newer
    save that only a comparison (no framework proof) calls incomplete, and protected if that save is whole, it
    is a warning, never a critical.
    """

    id = "spot-interruption-unprotected"
    family = "spot"
    concerns = frozenset({NODE, JOB})
    severity = Severity.CRITICAL
    iam_actions = tuple(dict.fromkeys(SPOT_IAM + CHECKPOINT_IAM))
    prefetch = (QUEUE_READ, SCHEDULED_EVENTS, CHECKPOINT_FACTS)
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        spot = spot_facts(ctx)
        items = interruptions(ctx, spot)
        if not items:
            return []
        newest = newest_usable_checkpoint(ctx)
        if newest.unverified is not None:
            ctx.unverified(f"whether the work on {len(items)} node(s) about to be interrupted is checkpointed",
                           *newest.unverified)
            return []
        max_age = ctx.settings.checkpoints.max_age
        findings = []
        for item in items:
            risk = work_at_risk(newest.best, newest.where, item.action_time, ctx.now, max_age)
            if not risk.unprotected:
                continue
            severity: Severity | None = None
            hint, heuristic = "", {}
            if newest.suspect is not None:
                scan, suspect = newest.suspect
                if not work_at_risk(newest.suspect, newest.where, item.action_time, ctx.now, max_age).unprotected:
                    # Only a comparison says the newer save is incomplete: no proof for a critical.
                    severity = Severity.WARNING
                    hint = (f" (counted past the newer {suspect.uri}, which only looks incomplete by a comparison, "
                            "not a framework's proof: if it is whole, this node's work is protected)")
                    heuristic = {"counted_past": suspect.uri, "counted_past_proof": scan.verdict(suspect).evidence()}
            findings.append(
                self.finding(
                    resource=item.instance_id,
                    severity=severity,
                    summary=f"{item.sentence(ctx.now)}; {risk.sentence()}{hint}: trigger a checkpoint now.",
                    evidence={
                        "instance": item.instance_id,
                        "action_time": item.action_time.isoformat(),
                        "seconds_left": item.seconds_left,
                        "cause": item.cause,
                        "max_age": format_duration(max_age),
                        **risk.evidence(),
                        "notices": [n.to_evidence(ctx.now) for n in item.notices],
                        **heuristic,
                    },
                )
            )
        return findings
