"""What the interruption checks share: IAM actions, one interruption per instance however many sources saw
it, and the newest usable checkpoint the cross-signal verdicts count from."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.checkpoints.facts import CLOCK_SKEW, checkpoint_facts, clock_skew_message
from fmdoctor.checkpoints.model import Checkpoint, LocationScan
from fmdoctor.durations import format_duration
from fmdoctor.engine.context import CheckContext
from fmdoctor.spot.notices import CAPACITY_RESERVATION, INTERRUPTION, SCHEDULED, SPOT, SpotNotice
from fmdoctor.spot.sources import SpotFacts

SPOT_IAM = ("ec2:DescribeInstances", "ec2:DescribeSpotInstanceRequests", "ec2:DescribeInstanceStatus",
            "sqs:GetQueueAttributes", "sqs:ReceiveMessage")
_DONE = {"terminate": "terminated", "stop": "stopped", "hibernate": "hibernated", "reboot": "rebooted",
         "retire": "retired", "maintenance": "taken down for maintenance"}
# A scheduled event (days of notice) is a warning until its window is this close, then critical.
SCHEDULED_IMMINENT = timedelta(hours=1)


@dataclass(frozen=True)
class Interruption:
    instance_id: str
    label: str
    action: str
    action_time: datetime
    seconds_left: int
    notices: tuple[SpotNotice, ...]
    cause: str

    @property
    def by(self) -> str:
        if self.cause == SCHEDULED:
            code = next((n.detail.split(":", 1)[0] for n in self.notices if n.cause == SCHEDULED), "")
            return f"an EC2 scheduled event ({code})" if code else "an EC2 scheduled event"
        if self.cause == CAPACITY_RESERVATION:
            return "EC2 (its interruptible Capacity Reservation is being reclaimed)"
        return self.cause

    @property
    def imminent(self) -> bool:
        return self.cause != SCHEDULED or self.seconds_left <= SCHEDULED_IMMINENT.total_seconds()

    def sentence(self, now: datetime) -> str:
        """'gpu-3 (i-...) will be terminated by EC2 Spot in about 1m40s (at ...)', or 'is being ... now' once
        the interruption time has passed."""
        stamp = self.action_time.isoformat(timespec="seconds")
        verb = _DONE.get(self.action, self.action)
        if self.seconds_left > 0:
            left = format_duration(timedelta(seconds=self.seconds_left))
            return f"{self.label} will be {verb} by {self.by} in about {left} (at {stamp})"
        ago = format_duration(max(now - self.action_time, timedelta(0)))
        return f"{self.label} is being {verb} by {self.by} now (its interruption time, {stamp}, passed {ago} ago)"

    def evidence(self, ctx: CheckContext, facts: SpotFacts) -> dict[str, Any]:
        return {
            "instance": self.instance_id,
            "action": self.action,
            "action_time": self.action_time.isoformat(),
            "seconds_left": self.seconds_left,
            "cause": self.cause,
            "notices": [n.to_evidence(ctx.now) for n in self.notices],
            "sources_read": list(facts.sources),
        }


def interruptions(ctx: CheckContext, facts: SpotFacts) -> list[Interruption]:
    """One per instance; where sources disagree on the time, the earliest (the pessimistic one) counts."""
    found = []
    for instance_id, notices in sorted(facts.of_kind(INTERRUPTION).items()):
        first = min(notices, key=lambda n: n.action_time or ctx.now)
        action_time = first.action_time or ctx.now
        found.append(Interruption(instance_id, label(ctx, instance_id), first.action or "terminate", action_time,
                                  first.seconds_left(ctx.now) or 0, tuple(notices), first.cause or SPOT))
    return found


def label(ctx: CheckContext, instance_id: str) -> str:
    if ctx.scope.aws is None and ctx.scope.host is not None:
        return f"{ctx.scope.host.name} ({instance_id})"
    return ctx.inventory.label(instance_id)


@dataclass(frozen=True)
class Newest:
    """The newest usable checkpoint across the configured locations, or why it cannot be known."""

    best: tuple[LocationScan, Checkpoint] | None
    where: str
    unverified: tuple[str, str] | None = None  # (code, message) when the checkpoints could not be judged
    # A newer checkpoint that only a comparison (a hint, no framework proof) kept from being the usable one:
    # a verdict that counts from ``best`` past it rests on a heuristic, so it may be a warning at most.
    suspect: tuple[LocationScan, Checkpoint] | None = None


def newest_usable_checkpoint(ctx: CheckContext) -> Newest:
    settings = ctx.settings.checkpoints
    if not settings.locations:
        return Newest(None, "", ("NoCheckpointLocation", "set checkpoints.locations or pass --checkpoint URI"))
    facts = checkpoint_facts(ctx)
    facts.gaps.report(ctx)
    best = facts.newest_usable()
    where = ", ".join(s.location for s in facts.scans)
    if best is None and not facts.scans:
        return Newest(None, where, ("CheckpointsUnreadable", "; ".join(facts.elsewhere) or "see the errors above"))
    if best is not None and best[1].last_modified > ctx.now + CLOCK_SKEW:
        return Newest(None, where, ("ClockSkew", clock_skew_message(best[1].last_modified, ctx.now)))
    suspects = [(scan, scan.suspect) for scan in facts.scans if scan.suspect is not None
                and (best is None or scan.suspect.last_modified > best[1].last_modified)]
    suspect = max(suspects, key=lambda pair: pair[1].last_modified) if suspects else None
    return Newest(best, where, suspect=suspect)
