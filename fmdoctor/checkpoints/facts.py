"""The checkpoint facts of one run: every configured location scanned once, shared by the checkpoint checks
and by ``spot-interruption-unprotected`` through ``ctx.shared``.

S3 and FSx locations are read against AWS (``fmdoctor check``); local paths only on the node itself
(``fmdoctor check --local``). A location the current mode cannot read is left to the other mode and never
judged here; when no location is readable in this mode, the checks are skipped with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from botocore.exceptions import ClientError

from fmdoctor.checkpoints.fsx import resolve_fsx
from fmdoctor.checkpoints.local import LocalLister, PathMissing
from fmdoctor.checkpoints.model import Checkpoint, Lister, LocationScan
from fmdoctor.checkpoints.s3 import S3Lister
from fmdoctor.checkpoints.scan import scan_location
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext, RunStart
from fmdoctor.engine.gaps import Gaps
from fmdoctor.engine.prefetch import EarlyLoad

SHARED_KEY = "checkpoints"
# S3 and file-system clocks may run ahead of this machine's: a checkpoint "from the future" within this is
# fresh; beyond it the evidence says the clocks disagree.
CLOCK_SKEW = timedelta(minutes=5)


@dataclass
class CheckpointFacts:
    configured: list[str]
    scans: list[LocationScan] = field(default_factory=list)
    gaps: Gaps = field(default_factory=Gaps)
    elsewhere: list[str] = field(default_factory=list)  # locations this mode cannot read, and why

    def newest_usable(self) -> tuple[LocationScan, Checkpoint] | None:
        """Across all locations, the most recent checkpoint a restart could resume from."""
        found: list[tuple[LocationScan, Checkpoint]] = []
        for scan in self.scans:
            if scan.usable is not None:
                found.append((scan, scan.usable))
        return max(found, key=lambda pair: pair[1].last_modified) if found else None


def checkpoint_facts(ctx: CheckContext) -> CheckpointFacts:
    return CHECKPOINT_FACTS.get(ctx)


def facts_or_not_applicable(ctx: CheckContext) -> CheckpointFacts:
    """The facts, with their gaps reported under this check; NotApplicable where nothing here can be read."""
    if not ctx.settings.checkpoints.locations:
        raise NotApplicable("no checkpoint location configured (checkpoints.locations in fmdoctor.yaml, "
                            "or --checkpoint URI)")
    facts = checkpoint_facts(ctx)
    facts.gaps.report(ctx)
    if not facts.scans and not facts.gaps:
        raise NotApplicable("; ".join(facts.elsewhere))
    if not facts.scans:
        raise Unverified("no checkpoint location could be read")  # the gaps above say why
    return facts


def age_of(checkpoint: Checkpoint, ctx: CheckContext) -> tuple[timedelta, bool]:
    """Age at ``ctx.now`` (never negative) and whether the timestamps are further ahead than clock skew allows."""
    age = ctx.now - checkpoint.last_modified
    return max(age, timedelta(0)), age < -CLOCK_SKEW


def clock_skew_message(last_modified: datetime, now: datetime) -> str:
    ahead = format_duration(last_modified - now)
    return (f"last modified {last_modified.isoformat()}, {ahead} ahead of this machine's clock ({now.isoformat()}); "
            "check NTP on this machine and on whatever wrote the checkpoint")


def load_checkpoint_facts(ctx: RunStart, _: str = "") -> CheckpointFacts:
    locations = list(ctx.settings.checkpoints.locations)
    ratio = ctx.settings.checkpoints.incomplete_size_ratio
    settled = ctx.now - ctx.settings.checkpoints.write_grace  # an unproven save written since may be under way
    facts = CheckpointFacts(configured=locations)
    local = [loc for loc in locations if loc.startswith("/")]
    s3 = [loc for loc in locations if loc.startswith("s3://")]
    fsx = [loc for loc in locations if loc not in local and loc not in s3]
    if ctx.aws is None:  # on the node: local paths only
        facts.elsewhere += [f"{loc} is read through AWS: run fmdoctor check without --local" for loc in s3 + fsx]
        for loc in local:
            _scan(facts, loc, LocalLister(ctx.node, loc), ratio, settled)
        return facts
    facts.elsewhere += [f"{loc} is a path on the nodes: run fmdoctor check --local on a node" for loc in local]
    s3_client = ctx.client("s3") if s3 or fsx else None
    if fsx:
        for target in resolve_fsx(ctx.client("fsx"), fsx, facts.gaps):
            if target.s3_uri is None:
                facts.gaps.add(
                    f"the newest checkpoint at {target.location} ({target.unreadable})",
                    "FsxContentsUnreadable",
                    f"the FSx API cannot list files; run fmdoctor check --local --checkpoint <mount>{target.path} "
                    "on a node that mounts it",
                )
            else:
                _scan(facts, target.location, S3Lister(s3_client, target.s3_uri), ratio, settled, via=target.via)
    for loc in s3:
        _scan(facts, loc, S3Lister(s3_client, loc), ratio, settled)
    return facts


# The configured locations' listings, read once per run and, needing no inventory, started before it.
CHECKPOINT_FACTS: EarlyLoad[CheckpointFacts] = EarlyLoad(
    SHARED_KEY, load_checkpoint_facts, ("s3:ListBucket", "fsx:DescribeFileSystems",
                                        "fsx:DescribeDataRepositoryAssociations"),
    lambda start: [""] if start.settings.checkpoints.locations else [])


def _scan(facts: CheckpointFacts, location: str, lister: Lister, min_ratio: float, settled: datetime,
          via: str | None = None) -> None:
    with facts.gaps.guard(f"checkpoints at {location}"):
        try:
            scan = scan_location(lister, location, via, min_ratio, settled)
        except PathMissing as exc:
            scan = LocationScan(location, lister.root, via=via, problem=exc.message)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchBucket":
                raise
            bucket = lister.root.removeprefix("s3://").split("/", 1)[0]
            scan = LocationScan(location, lister.root, via=via, problem=f"bucket {bucket} does not exist")
        facts.scans.append(scan)
