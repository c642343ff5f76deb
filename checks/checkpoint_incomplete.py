from __future__ import annotations

from fmdoctor.checkpoints.facts import age_of, facts_or_not_applicable
from fmdoctor.checkpoints.model import compare
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity

from ._checkpoint import CHECKPOINT_IAM, scans_with_checkpoints
from ._common import id_list, plural, sample


class CheckpointIncomplete(Check):
    """The newest checkpoint at every location has every file its predecessor had and at least
    checkpoints.incomplete_size_ratio of its size (a newest one still being written, within
    checkpoints.write_grace, is not judged yet).

    A save that died halfway (a node lost, a full disk, a killed job) leaves a checkpoint that looks newest
    and cannot be loaded: auto-resume picks it and the restart fails, or silently loads partial state.
    """

    id = "checkpoint-incomplete"
    family = "checkpoint"
    severity = Severity.CRITICAL
    iam_actions = CHECKPOINT_IAM
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = facts_or_not_applicable(ctx)
        settings = ctx.settings.checkpoints
        pairs = [s for s in scans_with_checkpoints(facts) if s.previous is not None]
        if facts.scans and not pairs:
            raise NotApplicable("fewer than two checkpoints at every location, so none to compare with")
        findings = []
        for scan in pairs:
            newest, previous = scan.newest, scan.previous
            assert newest is not None and previous is not None
            verdict = compare(newest, previous, settings.incomplete_size_ratio)
            age, _ = age_of(newest, ctx)
            if not verdict.incomplete or age < settings.write_grace:
                continue
            reasons = []
            if verdict.missing_files:
                reasons.append(f"{plural(len(verdict.missing_files), 'file')} of {previous.name} missing "
                               f"({id_list(list(verdict.missing_files))})")
            if verdict.too_small and verdict.size_ratio is not None:
                reasons.append(f"{verdict.size_ratio:.0%} of {previous.name}'s size")
            findings.append(
                self.finding(
                    resource=newest.uri,
                    summary=(
                        f"The newest checkpoint {newest.uri} looks incomplete ({'; '.join(reasons)}), a save that "
                        f"died halfway: make sure the job resumes from {previous.name}, not from it."
                    ),
                    evidence={
                        "newest": newest.describe(),
                        "previous": previous.describe(),
                        "missing_files": sample(list(verdict.missing_files)),
                        "missing_count": len(verdict.missing_files),
                        "size_ratio": round(verdict.size_ratio, 3) if verdict.size_ratio is not None else None,
                        "min_size_ratio": settings.incomplete_size_ratio,
                        "newest_age": format_duration(age),
                        "write_grace": format_duration(settings.write_grace),
                        **scan.evidence(),
                    },
                )
            )
        return findings
