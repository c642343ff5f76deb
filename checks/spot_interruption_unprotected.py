from __future__ import annotations

from fmdoctor.checkpoints.facts import CLOCK_SKEW, checkpoint_facts, clock_skew_message
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.spot.sources import spot_facts

from ._checkpoint import CHECKPOINT_IAM
from ._spot import SPOT_IAM, interruptions


class SpotInterruptionUnprotected(Check):
    """No node about to be interrupted by Spot would lose more work than the allowed checkpoint interval:
    at its interruption time, the newest usable checkpoint (an incomplete newest one does not count) is
    younger than checkpoints.max_age.

    The two-minute warning is the last chance to save: this names the work, in minutes, that the
    interruption would throw away if the job does not checkpoint now.
    """

    id = "spot-interruption-unprotected"
    family = "spot"
    severity = Severity.CRITICAL
    iam_actions = tuple(dict.fromkeys(SPOT_IAM + CHECKPOINT_IAM))
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        spot = spot_facts(ctx)
        items = interruptions(ctx, spot)
        if not items:
            return []
        settings = ctx.settings.checkpoints
        unverified = f"whether the work on {len(items)} node(s) about to be interrupted is checkpointed"
        if not settings.locations:
            ctx.unverified(unverified, "NoCheckpointLocation", "set checkpoints.locations or pass --checkpoint URI")
            return []
        facts = checkpoint_facts(ctx)
        facts.gaps.report(ctx)
        best = facts.newest_usable()
        if best is None and not facts.scans:
            ctx.unverified(unverified, "CheckpointsUnreadable", "; ".join(facts.elsewhere) or "see the errors above")
            return []
        if best is not None and best[1].last_modified > ctx.now + CLOCK_SKEW:
            ctx.unverified(unverified, "ClockSkew", clock_skew_message(best[1].last_modified, ctx.now))
            return []
        findings = []
        for item in items:
            if best is None:
                where = ", ".join(s.location for s in facts.scans)
                lost_min, risk = None, f"no checkpoint exists at {where}, so all the job's work is at risk"
                cp_facts = {"checkpoint": None, "checkpoint_step": None, "checkpoint_last_modified": None,
                            "location": where}
            else:
                scan, checkpoint = best
                lost = item.action_time - checkpoint.last_modified
                if lost <= settings.max_age:
                    continue
                lost_min = int(lost.total_seconds() // 60)
                risk = (f"its newest usable checkpoint ({checkpoint.uri}) will then be {lost_min} minutes old, "
                        f"so about {lost_min} minutes of work will be lost")
                cp_facts = {"checkpoint": checkpoint.uri, "checkpoint_step": checkpoint.step,
                            "checkpoint_last_modified": checkpoint.last_modified.isoformat(), "location": scan.location}
            findings.append(
                self.finding(
                    resource=item.instance_id,
                    summary=(
                        f"{item.sentence(ctx.now)}; {risk}: trigger a checkpoint now."
                    ),
                    evidence={
                        "instance": item.instance_id,
                        "action_time": item.action_time.isoformat(),
                        "seconds_left": item.seconds_left,
                        "minutes_lost": lost_min,
                        "max_age": format_duration(settings.max_age),
                        **cp_facts,
                        "notices": [n.to_evidence(ctx.now) for n in item.notices],
                    },
                )
            )
        return findings
