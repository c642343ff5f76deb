from __future__ import annotations

from fmdoctor.checkpoints.facts import age_of, clock_skew_message, facts_or_not_applicable
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity

from ._checkpoint import CHECKPOINT_IAM, scans_with_checkpoints


class CheckpointStale(Check):
    """The newest checkpoint at every configured location was written within the allowed interval
    (checkpoints.max_age, or --checkpoint-max-age).

    Checkpoints that stop arriving mean the job hung, crashed or fails to save, and every minute since the
    last one is work an interruption throws away.
    """

    id = "checkpoint-stale"
    family = "checkpoint"
    severity = Severity.WARNING
    iam_actions = CHECKPOINT_IAM
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = facts_or_not_applicable(ctx)
        max_age = ctx.settings.checkpoints.max_age
        findings = []
        for scan in scans_with_checkpoints(facts):
            newest = scan.newest
            assert newest is not None
            age, skewed = age_of(newest, ctx)
            if skewed:  # dated beyond any clock skew: its age is unknown, so it cannot pass as fresh
                ctx.unverified(f"the age of the newest checkpoint at {scan.location} ({newest.name})", "ClockSkew",
                               clock_skew_message(newest.last_modified, ctx.now))
                continue
            if age <= max_age:
                continue
            findings.append(
                self.finding(
                    resource=scan.location,
                    summary=(
                        f"The newest checkpoint at {scan.location} ({newest.name}) was written "
                        f"{format_duration(age)} ago, more than the allowed {format_duration(max_age)}: the job "
                        "may be hung, crashed or failing to save."
                    ),
                    evidence={
                        "newest": newest.uri,
                        "step": newest.step,
                        "last_modified": newest.last_modified.isoformat(),
                        "age": format_duration(age),
                        "age_s": int(age.total_seconds()),
                        "max_age": format_duration(max_age),
                        "clock_skew_suspected": skewed,
                        **scan.evidence(),
                    },
                )
            )
        return findings
