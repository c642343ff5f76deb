"""Spot interruption and rebalance notices from their three sources, parsed into one shape (pure functions).

- EventBridge events (delivered to SQS directly, or wrapped by SNS): 'EC2 Spot Instance Interruption
  Warning' (detail: instance-id, instance-action) is sent two minutes before the action; 'EC2 Instance
  Rebalance Recommendation' (detail: instance-id) earlier, when the capacity is at elevated risk.
- IMDS: spot/instance-action ({"action", "time"}) and events/recommendations/rebalance ({"noticeTime"}).
- EC2 Spot request status codes: marked-for-termination/-stop/-hibernation, instance-terminated-by-price...

Anything that does not parse raises :class:`Malformed`, which callers report instead of crashing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

INTERRUPTION = "interruption"
REBALANCE = "rebalance"
INTERRUPTION_EVENT = "EC2 Spot Instance Interruption Warning"
REBALANCE_EVENT = "EC2 Instance Rebalance Recommendation"

NOTICE_LEAD = timedelta(minutes=2)  # AWS warns two minutes before it interrupts
# An interruption whose time passed this long ago is history (a persistent request's stopped instance may
# be running again under the same id), not a current interruption.
STALE_AFTER = timedelta(minutes=10)
# Our clock may be behind AWS's: a notice dated this far ahead of now is still taken at face value.
CLOCK_SKEW = timedelta(minutes=5)

_ACTIONS = {"terminate", "stop", "hibernate"}
_MARKED = {"marked-for-termination": "terminate", "marked-for-stop": "stop", "marked-for-hibernation": "hibernate"}
_DONE_PREFIXES = {"instance-terminated-": "terminate", "instance-stopped-": "stop", "instance-hibernated-": "hibernate"}
_USER_SUFFIXES = ("-by-user", "-by-schedule")  # the owner's own action, not an interruption
_YEARS = (1970, 9998)


class Malformed(ValueError):
    """A message or reply that should be a Spot notice and is not one."""


@dataclass(frozen=True)
class SpotNotice:
    instance_id: str
    kind: str  # INTERRUPTION or REBALANCE
    source: str  # 'ec2', 'sqs' or 'imds'
    noticed_at: datetime  # when AWS issued it
    action: str | None = None  # terminate | stop | hibernate (interruptions)
    action_time: datetime | None = None  # when the interruption happens (interruptions)
    reference: str = ""  # SQS message id, Spot request id or IMDS path
    detail: str = ""  # the Spot request status code and message, when from EC2

    def seconds_left(self, now: datetime) -> int | None:
        """Time to the interruption, never negative, never more than AWS's two-minute lead (a slow local
        clock would otherwise promise more time than there is)."""
        if self.action_time is None:
            return None
        left = (self.action_time - now).total_seconds()
        return int(min(max(left, 0), NOTICE_LEAD.total_seconds()))

    def is_current(self, now: datetime, launch_time: datetime | None = None) -> bool:
        """False for history: issued before the instance was (re)started, or an interruption long past."""
        if launch_time is not None and self.noticed_at < launch_time - CLOCK_SKEW:
            return False
        return not (self.kind == INTERRUPTION and self.action_time and self.action_time < now - STALE_AFTER)

    def clock_skew_suspected(self, now: datetime) -> bool:
        return self.noticed_at > now + CLOCK_SKEW

    def to_evidence(self, now: datetime) -> dict[str, Any]:
        facts: dict[str, Any] = {"source": self.source, "noticed_at": self.noticed_at.isoformat()}
        if self.action_time:
            facts["action_time"] = self.action_time.isoformat()
        for key in ("action", "reference", "detail"):
            if getattr(self, key):
                facts[key] = getattr(self, key)
        if self.clock_skew_suspected(now):
            facts["clock_skew_suspected"] = True
        return facts


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
    try:
        when = (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError as exc:
        raise Malformed(f"{str(value)[:40]!r} is out of range") from exc
    if not _YEARS[0] <= when.year <= _YEARS[1]:  # leaves room for the two-minute lead either way
        raise Malformed(f"{str(value)[:40]!r} is not a plausible notice time")
    return when


def parse_message(body: str, reference: str = "") -> SpotNotice | None:
    """An SQS message body: an EventBridge event, or one wrapped in an SNS notification. ``None`` for a
    well-formed event of another kind (a state-change notification sharing the queue)."""
    event = _json_object(body, "message body")
    if event.get("Type") == "Notification" and isinstance(event.get("Message"), str):
        event = _json_object(event["Message"], "SNS message")
    detail_type = event.get("detail-type")
    if not isinstance(detail_type, str):
        raise Malformed("not an EventBridge event (no detail-type string)")
    kind = {INTERRUPTION_EVENT: INTERRUPTION, REBALANCE_EVENT: REBALANCE}.get(detail_type)
    if kind is None:
        return None
    detail = event.get("detail")
    if not isinstance(detail, dict):
        raise Malformed(f"{event['detail-type']} without a detail object")
    instance_id = detail.get("instance-id")
    if not isinstance(instance_id, str) or not instance_id.startswith("i-"):
        raise Malformed(f"{event['detail-type']} without a valid detail.instance-id")
    noticed = parse_time(event.get("time"))
    if kind == REBALANCE:
        return SpotNotice(instance_id, REBALANCE, "sqs", noticed, reference=reference)
    action = detail.get("instance-action")
    if not isinstance(action, str) or action not in _ACTIONS:
        raise Malformed(f"interruption warning with instance-action {action!r}")
    return SpotNotice(instance_id, INTERRUPTION, "sqs", noticed, action, noticed + NOTICE_LEAD, reference)


def parse_imds_instance_action(text: str, instance_id: str, now: datetime) -> SpotNotice:
    reply = _json_object(text, "IMDS spot/instance-action")
    action = reply.get("action")
    if not isinstance(action, str) or action not in _ACTIONS:
        raise Malformed(f"IMDS spot/instance-action with action {action!r}")
    when = parse_time(reply.get("time"))
    # IMDS gives only the action time; the notice came (about) two minutes before it.
    return SpotNotice(instance_id, INTERRUPTION, "imds", min(when - NOTICE_LEAD, now), action, when,
                      "latest/meta-data/spot/instance-action")


def parse_imds_rebalance(text: str, instance_id: str) -> SpotNotice:
    reply = _json_object(text, "IMDS events/recommendations/rebalance")
    return SpotNotice(instance_id, REBALANCE, "imds", parse_time(reply.get("noticeTime")),
                      reference="latest/meta-data/events/recommendations/rebalance")


def parse_spot_request(raw: dict[str, Any]) -> SpotNotice | None:
    """A DescribeSpotInstanceRequests entry; ``None`` unless its status code says EC2 is interrupting it."""
    status = raw.get("Status") or {}
    if not isinstance(status, dict):
        raise Malformed(f"Spot request Status is {type(status).__name__}, not an object")
    code = str(status.get("Code") or "")
    instance_id = raw.get("InstanceId")
    if instance_id is not None and not isinstance(instance_id, str):
        raise Malformed(f"Spot request InstanceId is {type(instance_id).__name__}, not a string")
    action = _MARKED.get(code)
    in_progress = action is None and not code.endswith(_USER_SUFFIXES)
    if in_progress:
        action = next((a for prefix, a in _DONE_PREFIXES.items() if code.startswith(prefix)), None)
    if action is None or not instance_id:
        return None
    updated = parse_time(status.get("UpdateTime"))
    action_time = updated if in_progress else updated + NOTICE_LEAD
    detail = f"{code}: {status.get('Message', '')}".rstrip(": ")
    return SpotNotice(instance_id, INTERRUPTION, "ec2", updated, action, action_time,
                      raw.get("SpotInstanceRequestId", ""), detail)


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise Malformed(f"{what} is not JSON: {str(text)[:60]!r}") from exc
    if not isinstance(value, dict):
        raise Malformed(f"{what} is JSON {type(value).__name__}, not an object")
    return value
