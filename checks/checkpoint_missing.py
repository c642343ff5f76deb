from __future__ import annotations

from fmdoctor.checkpoints.facts import CHECKPOINT_FACTS, facts_or_not_applicable
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import BUCKET, FILE_SYSTEM, JOB
from fmdoctor.engine.model import Finding, Severity

from ._checkpoint import CHECKPOINT_IAM


class CheckpointMissing(Check):
    """Every configured checkpoint location (S3 prefix, FSx for Lustre via its S3 export, or a local path on
    the node) holds at least one checkpoint.

    A job that has saved nothing where its config says (a wrong prefix, saves that fail, a mount that is
    not there) loses all its work on the first Spot interruption, Xid or crash.
    """

    id = "checkpoint-missing"
    family = "checkpoint"
    concerns = frozenset({BUCKET, FILE_SYSTEM, JOB})
    severity = Severity.WARNING
    iam_actions = CHECKPOINT_IAM
    prefetch = (CHECKPOINT_FACTS,)
    targets = frozenset({"cluster", "node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        facts = facts_or_not_applicable(ctx)
        findings = []
        for scan in facts.scans:
            if scan.newest is not None:
                continue
            why = f" ({scan.problem})" if scan.problem else ""
            findings.append(
                self.finding(
                    resource=scan.location,
                    summary=(
                        f"No checkpoint found at {scan.location}{why}; the job has nothing to resume from: check "
                        "its checkpoint path and its save logs."
                    ),
                    evidence={**scan.evidence(), "problem": scan.problem},
                )
            )
        return findings
