"""Interruption notices from the EC2 API and from IMDS on the node.

- DescribeSpotInstanceRequests status codes (EC2 user guide, spot-request-status.html):
  ``marked-for-termination``/``-stop``/``-hibernation`` and ``instance-terminated-by-price``... are
  interruptions; ``*-by-user`` and ``*-by-schedule`` are the owner's own doing, and
  ``instance-terminated-by-service`` is a stopped instance being terminated (nothing is running to lose).
- DescribeInstanceStatus scheduled events (API_InstanceStatusEvent.html): ``instance-reboot``,
  ``system-reboot``, ``system-maintenance``, ``instance-retirement``, ``instance-stop`` between NotBefore
  and NotAfter; a description starting ``[Completed]`` or ``[Canceled]`` is history.
- IMDS: ``spot/instance-action`` ({"action", "time"}), ``events/recommendations/rebalance``
  ({"noticeTime"}) and ``events/maintenance/scheduled`` (a list of {"Code", "NotBefore", "NotAfter",
  "State", ...}, dates like '21 Jan 2019 09:00:43 GMT'): instance-metadata-retrieval and
  monitoring-instances-status-check_sched in the EC2 user guide.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from fmdoctor.spot.notices import (
    ACTIONS,
    INTERRUPTION,
    NOTICE_LEAD,
    REBALANCE,
    SCHEDULED,
    Malformed,
    SpotNotice,
    json_object,
    parse_http_date,
    parse_time,
)

_MARKED = {"marked-for-termination": "terminate", "marked-for-stop": "stop", "marked-for-hibernation": "hibernate"}
_DONE_PREFIXES = {"instance-terminated-": "terminate", "instance-stopped-": "stop", "instance-hibernated-": "hibernate"}
# The owner's own action, or (by-service) the termination of an instance that was already stopped.
_NOT_INTERRUPTIONS = ("-by-user", "-by-schedule", "instance-terminated-by-service")
SCHEDULED_ACTIONS = {"instance-reboot": "reboot", "system-reboot": "reboot", "system-maintenance": "maintenance",
                     "instance-retirement": "retire", "instance-stop": "stop"}
_HISTORY = ("[Completed]", "[Canceled]")


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
    in_progress = action is None and not code.endswith(_NOT_INTERRUPTIONS)
    if in_progress:
        action = next((a for prefix, a in _DONE_PREFIXES.items() if code.startswith(prefix)), None)
    if action is None or not instance_id:
        return None
    updated = parse_time(status.get("UpdateTime"))
    action_time = updated if in_progress else updated + NOTICE_LEAD
    detail = f"{code}: {status.get('Message', '')}".rstrip(": ")
    return SpotNotice(instance_id, INTERRUPTION, "ec2", updated, action, action_time,
                      raw.get("SpotInstanceRequestId", ""), detail)


def parse_instance_status(raw: dict[str, Any], now: datetime) -> list[SpotNotice]:
    """The scheduled events of one DescribeInstanceStatus entry that are still to come or under way."""
    instance_id = raw.get("InstanceId")
    if not isinstance(instance_id, str):
        raise Malformed("instance status without an InstanceId")
    events = raw.get("Events") or []
    if not isinstance(events, list):
        raise Malformed(f"instance status Events is {type(events).__name__}, not a list")
    return [notice for event in events
            if (notice := _scheduled(instance_id, event, now, "ec2", "InstanceEventId", "Description")) is not None]


def parse_imds_scheduled(text: str, instance_id: str, now: datetime) -> list[SpotNotice]:
    """IMDS events/maintenance/scheduled: the node's own scheduled events, the same as EC2 reports them."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise Malformed(f"IMDS events/maintenance/scheduled is not JSON: {str(text)[:60]!r}") from exc
    if not isinstance(value, list):
        raise Malformed("IMDS events/maintenance/scheduled is not a list")
    notices = []
    for event in value:
        if isinstance(event, dict) and str(event.get("State", "active")).lower() in ("completed", "canceled"):
            continue
        notice = _scheduled(instance_id, event, now, "imds", "EventId", "Description")
        if notice is not None:
            notices.append(notice)
    return notices


def _scheduled(instance_id: str, event: Any, now: datetime, source: str, id_key: str,
               description_key: str) -> SpotNotice | None:
    if not isinstance(event, dict):
        raise Malformed(f"scheduled event of {instance_id} is not an object")
    code = event.get("Code")
    description = str(event.get(description_key) or "")
    if not isinstance(code, str) or code not in SCHEDULED_ACTIONS or description.startswith(_HISTORY):
        return None
    start = parse_http_date(event.get("NotBefore"))
    end = parse_http_date(event["NotAfter"]) if event.get("NotAfter") else None
    reference = str(event.get(id_key) or "")
    return SpotNotice(instance_id, INTERRUPTION, source, now, SCHEDULED_ACTIONS[code], start, reference,
                      f"{code}: {description}".rstrip(": "), SCHEDULED, end, None)


def parse_imds_instance_action(text: str, instance_id: str, now: datetime) -> SpotNotice:
    reply = json_object(text, "IMDS spot/instance-action")
    action = reply.get("action")
    if not isinstance(action, str) or action not in ACTIONS:
        raise Malformed(f"IMDS spot/instance-action with action {action!r}")
    when = parse_time(reply.get("time"))
    # IMDS gives only the action time; the notice came (about) two minutes before it.
    return SpotNotice(instance_id, INTERRUPTION, "imds", min(when - NOTICE_LEAD, now), action, when,
                      "latest/meta-data/spot/instance-action")


def parse_imds_rebalance(text: str, instance_id: str) -> SpotNotice:
    reply = json_object(text, "IMDS events/recommendations/rebalance")
    return SpotNotice(instance_id, REBALANCE, "imds", parse_time(reply.get("noticeTime")),
                      reference="latest/meta-data/events/recommendations/rebalance")
