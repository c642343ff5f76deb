from __future__ import annotations

from datetime import timedelta

from fmdoctor.checkpoints.compare import WHY_IT_COULD_BE_WRONG
from fmdoctor.checkpoints.facts import CHECKPOINT_FACTS, age_of, facts_or_not_applicable
from fmdoctor.checkpoints.model import COMPARISON, WOULD_PROVE, Checkpoint, LocationScan, Verdict
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import BUCKET, FILE_SYSTEM, JOB
from fmdoctor.engine.model import Finding, Severity

from ._checkpoint import CHECKPOINT_IAM, scans_with_checkpoints
from ._common import sample


class CheckpointIncomplete(Check):
    """The newest checkpoint at every location is complete by its framework's own proof, read from listings
    (PyTorch DCP's .metadata, DeepSpeed's 'latest', Megatron's tracker and dist-checkpointing metadata.json,
    NeMo's '-unfinished' marker, HF Trainer's trainer_state.json and tmp-checkpoint staging, Accelerate's
    random_states_<process>.pkl, Orbax's commit_success.txt and temporary folders, Composer's latest-rank0,
    safetensors shard counts, Lightning's atomic .ckpt, one S3 object). Only a proof raises a critical.

    A save that died halfway (a node lost, a full disk, a killed job) leaves a checkpoint that looks newest
    and cannot be loaded: auto-resume picks it and the restart fails, or silently loads partial state. The
    rules follow each framework's writer (sources in fmdoctor/checkpoints/frameworks.py, the README's checkpoint
    table and the runbook); a job resumed on fewer ranks writes fewer shards and is not incomplete. Where no
    marker applies, the newest is compared with its predecessor (kinds of file, rank grids, bytes by directory):
    a hint, raised at most as a warning that says so, and otherwise "not verified" with what would prove it. A
    newest checkpoint still being written (within checkpoints.write_grace) is not judged yet.
    """

    id = "checkpoint-incomplete"
    family = "checkpoint"
    concerns = frozenset({BUCKET, FILE_SYSTEM, JOB})
    severity = Severity.CRITICAL
    iam_actions = CHECKPOINT_IAM
    prefetch = (CHECKPOINT_FACTS,)
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = facts_or_not_applicable(ctx)
        findings = []
        for scan in scans_with_checkpoints(facts):
            newest = scan.newest
            assert newest is not None
            verdict = scan.verdict(newest)
            age, _ = age_of(newest, ctx)
            if age < ctx.settings.checkpoints.write_grace or verdict.proven and not verdict.incomplete:
                continue
            if verdict.incomplete:
                findings.append(self._incomplete(ctx, scan, newest, verdict, age))
                continue
            compared = f"; {verdict.proofs[0]}" if verdict.method == COMPARISON else ""
            ctx.unverified(f"whether the newest checkpoint {newest.uri} is whole", "NoFrameworkProof",
                           f"no framework marker applies to its files{compared}; what would prove it: {WOULD_PROVE}")
        return findings

    def _incomplete(self, ctx: CheckContext, scan: LocationScan, newest: Checkpoint, verdict: Verdict,
                    age: timedelta) -> Finding:
        settings = ctx.settings.checkpoints
        resume = scan.usable
        advice = (f"make sure the job resumes from {resume.name}, not from it" if resume is not None
                  else "no complete checkpoint was found before it, so a restart starts over")
        if verdict.proven:
            severity = Severity.CRITICAL
            summary = (f"The newest checkpoint {newest.uri} is incomplete, a save that died halfway "
                       f"({verdict.framework}'s own proof): {verdict.reasons[0]}; {advice}.")
        else:
            severity = Severity.WARNING
            summary = (f"The newest checkpoint {newest.uri} may be incomplete: {verdict.reasons[0]}. This is "
                       f"{WHY_IT_COULD_BE_WRONG}; no framework marker applies, so if it is a save that died, "
                       f"{advice}.")
        return self.finding(
            resource=newest.uri,
            summary=summary,
            severity=severity,
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
                **({} if verdict.proven else {"why_it_could_be_wrong": WHY_IT_COULD_BE_WRONG,
                                              "would_prove": WOULD_PROVE}),
            },
        )
