"""The cross-signal verdict of an interruption: how much work is lost when the node goes, counted from the
newest usable checkpoint (the one a restart would load), and whether that is more than the job allows.

An interruption is *unprotected* when, at its time, the newest usable checkpoint will be older than
``checkpoints.max_age`` and the job's next regular save cannot be counted on before it: that save is already
overdue, or falls due in the last two minutes (AWS's shortest warning, too short to finish a large save).
For a two-minute Spot warning that is exactly "older than max_age at the interruption"; for an event hours or
days ahead (a Capacity Block ending, a scheduled retirement) a job that keeps saving on time is protected,
and one whose checkpoints have stopped is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.checkpoints.model import Checkpoint, LocationScan
from fmdoctor.spot.notices import NOTICE_LEAD


@dataclass(frozen=True)
class WorkAtRisk:
    checkpoint: Checkpoint | None
    scan: LocationScan | None
    where: str  # the location(s) read
    minutes_lost: int | None  # at the interruption, if nothing is saved before it; None: everything
    unprotected: bool

    def sentence(self) -> str:
        if self.checkpoint is None:
            return f"no usable checkpoint exists at {self.where}, so all the job's work is at risk"
        return (f"its newest usable checkpoint ({self.checkpoint.uri}) will then be {self.minutes_lost} minutes "
                f"old, so about {self.minutes_lost} minutes of work will be lost unless the job saves first")

    def by_then(self) -> str:
        """The same, for a sentence that has already said when ('...; by then its newest usable checkpoint...')."""
        if self.checkpoint is None:
            return f"no usable checkpoint exists at {self.where}: all the job's work is at risk"
        return (f"by then its newest usable checkpoint ({self.checkpoint.uri}) will be {self.minutes_lost} minutes "
                f"old, so about {self.minutes_lost} minutes of work will be lost unless the job saves first")

    def evidence(self) -> dict[str, Any]:
        cp = self.checkpoint
        facts: dict[str, Any] = {
            "minutes_lost": self.minutes_lost,
            "checkpoint": cp.uri if cp else None,
            "checkpoint_step": cp.step if cp else None,
            "checkpoint_last_modified": cp.last_modified.isoformat() if cp else None,
            "location": self.scan.location if self.scan else self.where,
        }
        if cp is not None and self.scan is not None:
            facts["proof"] = self.scan.verdict(cp).evidence()
            if cp is self.scan.usable:
                facts["usable_because"] = self.scan.usable_because()
        return facts


def work_at_risk(best: tuple[LocationScan, Checkpoint] | None, where: str, action_time: datetime, now: datetime,
                 max_age: timedelta) -> WorkAtRisk:
    if best is None:
        return WorkAtRisk(None, None, where, None, True)
    scan, checkpoint = best
    lost = action_time - checkpoint.last_modified
    next_save_due = checkpoint.last_modified + max_age
    too_late = now + min(max(action_time - now, timedelta(0)), NOTICE_LEAD)
    unprotected = lost > max_age and next_save_due < too_late
    return WorkAtRisk(checkpoint, scan, where, max(int(lost.total_seconds() // 60), 0), unprotected)
