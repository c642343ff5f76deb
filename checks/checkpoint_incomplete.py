from __future__ import annotations

from fmdoctor.checkpoints.facts import age_of, facts_or_not_applicable
from fmdoctor.checkpoints.model import UNPROVEN
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import BUCKET, FILE_SYSTEM, JOB
from fmdoctor.engine.model import Finding, Severity

from ._checkpoint import CHECKPOINT_IAM, scans_with_checkpoints
from ._common import sample


class CheckpointIncomplete(Check):
    """The newest checkpoint at every location is complete by its framework's own proof (PyTorch DCP's
    .metadata, DeepSpeed's 'latest', Megatron's tracker, no NeMo '-unfinished' marker, HF Trainer's
    trainer_state.json, Lightning's atomic .ckpt), or, where the framework leaves none, has every kind of file
    its predecessor had and at least checkpoints.incomplete_size_ratio of its size (a newest one still being
    written, within checkpoints.write_grace, is not judged yet).

    A save that died halfway (a node lost, a full disk, a killed job) leaves a checkpoint that looks newest
    and cannot be loaded: auto-resume picks it and the restart fails, or silently loads partial state. The
    rules follow each framework's writer (sources in fmdoctor/checkpoints/frameworks.py and the runbook); a
    job resumed on fewer ranks writes fewer shards and is not incomplete.
    """

    id = "checkpoint-incomplete"
    family = "checkpoint"
    concerns = frozenset({BUCKET, FILE_SYSTEM, JOB})
    severity = Severity.CRITICAL
    iam_actions = CHECKPOINT_IAM
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = facts_or_not_applicable(ctx)
        settings = ctx.settings.checkpoints
        judged = [s for s in scans_with_checkpoints(facts) if s.newest and s.verdict(s.newest).method != UNPROVEN]
        if facts.scans and not judged:
            raise NotApplicable("no framework marker and fewer than two checkpoints at every location, so "
                                "nothing proves or disproves the newest one")
        findings = []
        for scan in judged:
            newest = scan.newest
            assert newest is not None
            verdict = scan.verdict(newest)
            age, _ = age_of(newest, ctx)
            if not verdict.incomplete or age < settings.write_grace:
                continue
            resume = scan.usable
            advice = (f"make sure the job resumes from {resume.name}, not from it" if resume is not None
                      else "no complete checkpoint was found before it, so a restart starts over")
            findings.append(
                self.finding(
                    resource=newest.uri,
                    summary=(f"The newest checkpoint {newest.uri} is incomplete, a save that died halfway: "
                             f"{verdict.reasons[0]}; {advice}."),
                    evidence={
                        "newest": newest.describe(),
                        "previous": scan.previous.describe() if scan.previous else None,
                        "resume_from": resume.describe() if resume else None,
                        "reasons": list(verdict.reasons),
                        "missing_files": sample(list(verdict.missing_files)),
                        "missing_count": len(verdict.missing_files),
                        "size_ratio": round(verdict.size_ratio, 3) if verdict.size_ratio is not None else None,
                        "min_size_ratio": settings.incomplete_size_ratio,
                        "newest_age": format_duration(age),
                        "write_grace": format_duration(settings.write_grace),
                        **scan.evidence(),
                        "proof": verdict.evidence(),
                    },
                )
            )
        return findings
