"""What the Spot checks share: IAM actions and one interruption per instance, however many sources saw it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.durations import format_duration
from fmdoctor.engine.context import CheckContext
from fmdoctor.spot.notices import INTERRUPTION, SpotNotice
from fmdoctor.spot.sources import SpotFacts

SPOT_IAM = ("ec2:DescribeInstances", "ec2:DescribeSpotInstanceRequests", "sqs:GetQueueAttributes",
            "sqs:ReceiveMessage")
_DONE = {"terminate": "terminated", "stop": "stopped", "hibernate": "hibernated"}


@dataclass(frozen=True)
class Interruption:
    instance_id: str
    label: str
    action: str
    action_time: datetime
    seconds_left: int
    notices: tuple[SpotNotice, ...]

    def sentence(self, now: datetime) -> str:
        """'gpu-3 (i-...) will be terminated by EC2 Spot in about 1m40s (at ...)', or 'is being ... now' once
        the interruption time has passed."""
        stamp = self.action_time.isoformat(timespec="seconds")
        verb = _DONE.get(self.action, self.action)
        if self.seconds_left > 0:
            left = format_duration(timedelta(seconds=self.seconds_left))
            return f"{self.label} will be {verb} by EC2 Spot in about {left} (at {stamp})"
        ago = format_duration(max(now - self.action_time, timedelta(0)))
        return f"{self.label} is being {verb} by EC2 Spot now (its interruption time, {stamp}, passed {ago} ago)"

    def evidence(self, ctx: CheckContext, facts: SpotFacts) -> dict[str, Any]:
        return {
            "instance": self.instance_id,
            "action": self.action,
            "action_time": self.action_time.isoformat(),
            "seconds_left": self.seconds_left,
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
                                  first.seconds_left(ctx.now) or 0, tuple(notices)))
    return found


def label(ctx: CheckContext, instance_id: str) -> str:
    if ctx.scope.aws is None and ctx.scope.host is not None:
        return f"{ctx.scope.host.name} ({instance_id})"
    return ctx.inventory.label(instance_id)
