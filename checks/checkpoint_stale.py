from __future__ import annotations

from datetime import timedelta

from fmdoctor.checkpoints.facts import CHECKPOINT_FACTS, age_of, clock_skew_message, facts_or_not_applicable
from fmdoctor.checkpoints.model import LocationScan
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import BUCKET, FILE_SYSTEM, JOB
from fmdoctor.engine.model import Finding, Severity

from ._checkpoint import CHECKPOINT_IAM, scans_with_checkpoints


class CheckpointStale(Check):
    """The newest usable checkpoint at every configured location (the one a restart would load: a save
    still under way or one that died does not count) was written within the allowed interval
    (checkpoints.max_age, or --checkpoint-max-age). The evidence's ``proof`` and ``usable_because`` say which
    framework's proof made it usable, or that none did.

    Checkpoints that stop arriving mean the job hung, crashed or fails to save, and every minute since the
    last usable one is work an interruption throws away. While a newer save is under way (within
    checkpoints.write_grace) the interval may run over by that grace.
    """

    id = "checkpoint-stale"
    family = "checkpoint"
    concerns = frozenset({BUCKET, FILE_SYSTEM, JOB})
    severity = Severity.WARNING
    iam_actions = CHECKPOINT_IAM
    prefetch = (CHECKPOINT_FACTS,)
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = facts_or_not_applicable(ctx)
        settings = ctx.settings.checkpoints
        findings = []
        for scan in scans_with_checkpoints(facts):
            newest, usable = scan.newest, scan.usable
            assert newest is not None
            saving = scan.in_progress
            saving_age = age_of(saving, ctx)[0] if saving is not None else None
            under_way = saving_age is not None and saving_age < settings.write_grace
            if usable is None:
                findings.append(self._none_usable(scan, ctx, under_way))
                continue
            age, skewed = age_of(usable, ctx)
            if skewed:  # dated beyond any clock skew: its age is unknown, so it cannot pass as fresh
                ctx.unverified(f"the age of the newest checkpoint at {scan.location} ({usable.name})", "ClockSkew",
                               clock_skew_message(usable.last_modified, ctx.now))
                continue
            allowed = settings.max_age + (settings.write_grace if under_way else timedelta(0))
            if age <= allowed:
                continue
            note = (f"; a newer save ({newest.name}) has been under way for {format_duration(saving_age)}"
                    if under_way and saving_age is not None else
                    f"; the newer {newest.name} only looks incomplete (a comparison, not a proof)"
                    if saving is not None and saving is scan.suspect else
                    f"; the newer {newest.name} is incomplete" if saving is not None else "")
            findings.append(
                self.finding(
                    resource=scan.location,
                    summary=(
                        f"The newest usable checkpoint at {scan.location} ({usable.name}, {scan.usable_because()}) "
                        "was written "
                        f"{format_duration(age)} ago, more than the allowed {format_duration(settings.max_age)}"
                        f"{note}: the job may be hung, crashed or failing to save."
                    ),
                    evidence={
                        "newest": newest.uri,
                        "step": usable.step,
                        "last_modified": usable.last_modified.isoformat(),
                        "age": format_duration(age),
                        "age_s": int(age.total_seconds()),
                        "max_age": format_duration(settings.max_age),
                        "clock_skew_suspected": skewed,
                        "save_under_way": under_way,
                        **scan.evidence(),
                    },
                )
            )
        return findings

    def _none_usable(self, scan: LocationScan, ctx: CheckContext, under_way: bool) -> Finding:
        judged = list(scan.verdicts)
        why = (f"the newest save ({scan.newest.name}) is still being written and none before it is whole"
               if under_way and scan.newest is not None else
               f"the newest {len(judged)} saves ({', '.join(judged)}) are all incomplete")
        return self.finding(
            resource=scan.location,
            summary=(f"No usable checkpoint at {scan.location}: {why}, so a restart now would start over; see "
                     "checkpoint-incomplete."),
            evidence={"newest": scan.newest.uri if scan.newest else None, "step": None, "last_modified": None,
                      "age": None, "age_s": None, "max_age": format_duration(ctx.settings.checkpoints.max_age),
                      "clock_skew_suspected": False, "save_under_way": under_way,
                      "incomplete": {name: v.evidence() for name, v in scan.verdicts.items()},
                      **scan.evidence()},
        )
