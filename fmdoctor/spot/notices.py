"""Interruption notices as one shape, whatever their source, and the time rules every parser shares.

An interruption is any warning that EC2 is about to take a node away: a Spot interruption (two minutes), an
interruptible Capacity Reservation reclaiming its capacity (two minutes), or an EC2 scheduled event
(retirement, reboot, maintenance: days ahead). A rebalance recommendation is an earlier Spot warning; a
Capacity Block expiration warning names a reservation, not an instance (:class:`CapacityBlockWarning`).

Parsers live beside this module (:mod:`fmdoctor.spot.events` for SQS messages, :mod:`fmdoctor.spot.ec2` for
EC2 and IMDS replies). Anything that does not parse raises :class:`Malformed`, which callers report instead
of crashing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

INTERRUPTION = "interruption"
REBALANCE = "rebalance"

# What takes the node away (SpotNotice.cause).
SPOT = "EC2 Spot"
CAPACITY_RESERVATION = "an interruptible Capacity Reservation"
SCHEDULED = "an EC2 scheduled event"

NOTICE_LEAD = timedelta(minutes=2)  # AWS warns two minutes before a Spot or interruptible-reservation interruption
# An interruption whose time passed this long ago is history (a persistent request's stopped instance may
# be running again under the same id), not a current interruption.
STALE_AFTER = timedelta(minutes=10)
# Our clock may be behind AWS's: a notice dated this far ahead of now is still taken at face value.
CLOCK_SKEW = timedelta(minutes=5)

ACTIONS = {"terminate", "stop", "hibernate"}
_YEARS = (1970, 9998)


class Malformed(ValueError):
    """A message or reply that should be an interruption notice and is not one."""


@dataclass(frozen=True)
class SpotNotice:
    instance_id: str
    kind: str  # INTERRUPTION or REBALANCE
    source: str  # 'ec2', 'sqs' or 'imds'
    noticed_at: datetime  # when AWS issued it
    action: str | None = None  # terminate | stop | hibernate | reboot | retire | maintenance (interruptions)
    action_time: datetime | None = None  # when the interruption happens (interruptions)
    reference: str = ""  # SQS message id, Spot request id, scheduled event id or IMDS path
    detail: str = ""  # the Spot request status, the scheduled event's code and description
    cause: str = SPOT
    window_end: datetime | None = None  # a scheduled event's NotAfter: it may happen until then
    lead: timedelta | None = NOTICE_LEAD  # how much warning AWS gives; None for scheduled events (days)
    time_assumed: bool = False  # the event carried no time: read as 'now', as aws-node-termination-handler does

    def seconds_left(self, now: datetime) -> int | None:
        """Time to the interruption, never negative, and never more than AWS's lead for two-minute warnings
        (a slow local clock would otherwise promise more time than there is)."""
        if self.action_time is None:
            return None
        left = max((self.action_time - now).total_seconds(), 0)
        return int(min(left, self.lead.total_seconds()) if self.lead is not None else left)

    def is_current(self, now: datetime, launch_time: datetime | None = None) -> bool:
        """False for history: issued before the instance was (re)started, or an interruption long past."""
        if launch_time is not None and self.noticed_at < launch_time - CLOCK_SKEW:
            return False
        end = self.window_end or self.action_time
        return not (self.kind == INTERRUPTION and end and end < now - STALE_AFTER)

    def clock_skew_suspected(self, now: datetime) -> bool:
        return self.noticed_at > now + CLOCK_SKEW

    def to_evidence(self, now: datetime) -> dict[str, Any]:
        facts: dict[str, Any] = {"source": self.source, "cause": self.cause, "noticed_at": self.noticed_at.isoformat()}
        if self.action_time:
            facts["action_time"] = self.action_time.isoformat()
        if self.window_end:
            facts["window_end"] = self.window_end.isoformat()
        for key in ("action", "reference", "detail"):
            if getattr(self, key):
                facts[key] = getattr(self, key)
        if self.time_assumed:
            facts["time_assumed"] = "the event had no time; read as the moment it was read"
        if self.clock_skew_suspected(now):
            facts["clock_skew_suspected"] = True
        return facts


@dataclass(frozen=True)
class CapacityBlockWarning:
    """EventBridge's 'Capacity Block Reservation Expiration Warning': the reservation ends at ``end_date``, and
    its instances begin to terminate ten minutes after the warning (thirty minutes before the end)."""

    reservation_id: str
    noticed_at: datetime
    end_date: datetime | None
    reference: str = ""
    time_assumed: bool = False


Notice = SpotNotice | CapacityBlockWarning


def parse_time(value: Any) -> datetime:
    """ISO 8601 with 'Z' or an offset; a naive time is UTC (as AWS means it). Always returns an aware UTC time."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str) and value.strip():
        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError as exc:
            raise Malformed(f"{value[:40]!r} is not an ISO 8601 time") from exc
    else:
        raise Malformed(f"expected an ISO 8601 time, got {type(value).__name__}")
    return _plausible(when, value)


def parse_http_date(value: Any) -> datetime:
    """An RFC 1123 date as AWS Health ('Sat, 05 Jun 2016 15:10:09 GMT') and IMDS scheduled events
    ('21 Jan 2019 09:00:43 GMT') write it; ISO 8601 is accepted too."""
    if isinstance(value, str) and value.strip() and not value.strip()[:4].isdigit():
        try:
            return _plausible(parsedate_to_datetime(value.strip()), value)
        except (TypeError, ValueError, IndexError) as exc:
            raise Malformed(f"{value[:40]!r} is not an RFC 1123 date") from exc
    return parse_time(value)


def event_time(value: Any, now: datetime) -> tuple[datetime, bool]:
    """An EventBridge event's 'time': empty or absent means now (aws-node-termination-handler's
    ``EventBridgeEvent.getTime``); anything else must parse."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return now, True
    return parse_time(value), False


def _plausible(when: datetime, raw: Any) -> datetime:
    try:
        when = (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError as exc:
        raise Malformed(f"{str(raw)[:40]!r} is out of range") from exc
    if not _YEARS[0] <= when.year <= _YEARS[1]:  # leaves room for the two-minute lead either way
        raise Malformed(f"{str(raw)[:40]!r} is not a plausible notice time")
    return when


def json_object(text: Any, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise Malformed(f"{what} is not JSON: {str(text)[:60]!r}") from exc
    if not isinstance(value, dict):
        raise Malformed(f"{what} is JSON {type(value).__name__}, not an object")
    return value
