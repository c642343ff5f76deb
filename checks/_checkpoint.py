"""What the checkpoint checks share: their IAM actions and the 'nothing to judge' rule."""

from __future__ import annotations

from fmdoctor.checkpoints.facts import CheckpointFacts
from fmdoctor.checkpoints.model import LocationScan
from fmdoctor.engine.check import NotApplicable

# Listing is all they need: s3:GetObject is never used, so checkpoint contents stay unreadable to fmdoctor.
CHECKPOINT_IAM = ("s3:ListBucket", "fsx:DescribeFileSystems", "fsx:DescribeDataRepositoryAssociations")


def scans_with_checkpoints(facts: CheckpointFacts) -> list[LocationScan]:
    found = [scan for scan in facts.scans if scan.newest is not None]
    if facts.scans and not found:
        raise NotApplicable("no checkpoint found at any location (see checkpoint-missing)")
    return found
