"""SQS messages as an EventBridge rule, SNS or Auto Scaling delivers them, read into notices.

The queue is often the one aws-node-termination-handler's queue processor reads, so it carries messages
that are not interruptions: Auto Scaling lifecycle-hook messages sent straight to SQS (no ``detail-type``;
``autoscaling:TEST_NOTIFICATION`` when the hook is created), EC2 state-change events, Capacity Block
delivery events. Those are ignored quietly and counted; only a message that fits none of these shapes is
:class:`~fmdoctor.spot.notices.Malformed`. The shapes follow aws-node-termination-handler's reader
(``pkg/monitor/sqsevent/sqs-monitor.go``, ``asg-lifecycle-event.go``, ``spot-itn-event.go``,
``scheduled-change-event.go``, ``event-bridge.go``) and the EC2 user guide's sample events:
spot-instance-termination-notices.html, rebalance-recommendations.html, capacity-blocks-monitor.html
(Capacity Block expiration, whose sample spells the key ``detail_type``) and monitor-interruptible-cr.html
(interruptible Capacity Reservations).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fmdoctor.spot.notices import (
    ACTIONS,
    CAPACITY_RESERVATION,
    INTERRUPTION,
    NOTICE_LEAD,
    REBALANCE,
    SCHEDULED,
    SPOT,
    CapacityBlockWarning,
    Malformed,
    Notice,
    SpotNotice,
    event_time,
    json_object,
    parse_http_date,
    parse_time,
)

INTERRUPTION_EVENT = "EC2 Spot Instance Interruption Warning"
REBALANCE_EVENT = "EC2 Instance Rebalance Recommendation"
CAPACITY_RESERVATION_INTERRUPTION_EVENT = "EC2 Capacity Reservation Instance Interruption Warning"
# The EC2 user guide has named it both ways over time; both are read.
CAPACITY_BLOCK_EXPIRY_EVENTS = ("Capacity Block Reservation Expiration Warning", "Capacity Block Expiration Warning")
HEALTH_EVENT = "AWS Health Event"
ASG_TEST_NOTIFICATION = "autoscaling:TEST_NOTIFICATION"
CAPACITY_BLOCK_WARNING_LEAD = 40  # minutes before the end, per capacity-blocks-monitor.html

# Ignored categories, as counted in the evidence.
LIFECYCLE = "Auto Scaling lifecycle-hook messages"
TEST = "Auto Scaling test notifications"
OTHER = "other events"


@dataclass(frozen=True)
class Parsed:
    notices: tuple[Notice, ...] = ()
    ignored: str | None = None  # why a well-formed message carries nothing for fmdoctor


def parse_message(body: str, reference: str, now: datetime) -> Parsed:
    """An SQS message body: an EventBridge event, an Auto Scaling message, or either wrapped in SNS."""
    event = json_object(body, "message body")
    if event.get("Type") == "Notification" and isinstance(event.get("Message"), str):
        event = json_object(event["Message"], "SNS message")
    detail_type = event.get("detail-type", event.get("detail_type"))
    if detail_type is None:
        return _auto_scaling(event)
    if not isinstance(detail_type, str):
        raise Malformed("not an EventBridge event (detail-type is not a string)")
    detail = event.get("detail")
    if detail_type == HEALTH_EVENT:
        return _health(event, _detail(detail, detail_type), reference, now)
    if detail_type in CAPACITY_BLOCK_EXPIRY_EVENTS:
        return _capacity_block(event, _detail(detail, detail_type), reference, now)
    kind = {INTERRUPTION_EVENT: INTERRUPTION, REBALANCE_EVENT: REBALANCE,
            CAPACITY_RESERVATION_INTERRUPTION_EVENT: INTERRUPTION}.get(detail_type)
    if kind is None:
        return Parsed(ignored=OTHER)
    detail = _detail(detail, detail_type)
    instance_id = _instance_id(detail.get("instance-id"), detail_type)
    noticed, assumed = event_time(event.get("time"), now)
    if kind == REBALANCE:
        return Parsed((SpotNotice(instance_id, REBALANCE, "sqs", noticed, reference=reference, time_assumed=assumed),))
    action = detail.get("instance-action")
    if not isinstance(action, str) or action not in ACTIONS:
        raise Malformed(f"{detail_type} with instance-action {action!r}")
    action_time = noticed + NOTICE_LEAD
    cause = SPOT
    if detail_type == CAPACITY_RESERVATION_INTERRUPTION_EVENT:
        cause = CAPACITY_RESERVATION
        if detail.get("instance-termination-time"):
            action_time = parse_time(detail["instance-termination-time"])
    return Parsed((SpotNotice(instance_id, INTERRUPTION, "sqs", noticed, action, action_time, reference,
                              cause=cause, time_assumed=assumed),))


def _auto_scaling(event: dict[str, Any]) -> Parsed:
    """Auto Scaling's own message to an SQS lifecycle-hook target (no EventBridge envelope)."""
    if ASG_TEST_NOTIFICATION in (event.get("Event"), event.get("LifecycleTransition")):
        return Parsed(ignored=TEST)
    if isinstance(event.get("LifecycleTransition"), str) or isinstance(event.get("LifecycleHookName"), str):
        return Parsed(ignored=LIFECYCLE)
    raise Malformed("neither an EventBridge event (no detail-type) nor an Auto Scaling message")


def _health(event: dict[str, Any], detail: dict[str, Any], reference: str, now: datetime) -> Parsed:
    """An AWS Health 'scheduledChange' for EC2: each affected instance is interrupted from its start time."""
    if detail.get("service") != "EC2" or detail.get("eventTypeCategory") != "scheduledChange":
        return Parsed(ignored=OTHER)
    if detail.get("statusCode") == "closed":
        return Parsed(ignored=OTHER)
    code = str(detail.get("eventTypeCode") or "")
    noticed, assumed = event_time(event.get("time"), now)
    start = parse_http_date(detail["startTime"]) if detail.get("startTime") else noticed
    end = parse_http_date(detail["endTime"]) if detail.get("endTime") else None
    entities = detail.get("affectedEntities") or []
    if not isinstance(entities, list):
        raise Malformed(f"{HEALTH_EVENT} with affectedEntities of type {type(entities).__name__}")
    ids = [e.get("entityValue") for e in entities if isinstance(e, dict)]
    resources = event.get("resources")
    ids += resources if isinstance(resources, list) else []
    instances = sorted({i for i in ids if isinstance(i, str) and i.startswith("i-")})
    notices = tuple(SpotNotice(i, INTERRUPTION, "sqs", noticed, health_action(code), start, reference,
                               f"AWS Health {code}", SCHEDULED, end, None, assumed) for i in instances)
    return Parsed(notices, ignored=None if notices else OTHER)


def health_action(code: str) -> str:
    """What an AWS Health EC2 event type does to the instance ('AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED')."""
    for word, action in (("RETIREMENT", "retire"), ("STOP", "stop"), ("REBOOT", "reboot")):
        if word in code:
            return action
    return "maintenance"


def _capacity_block(event: dict[str, Any], detail: dict[str, Any], reference: str, now: datetime) -> Parsed:
    reservation = detail.get("capacity-reservation-id")
    if not isinstance(reservation, str) or not reservation.startswith("cr-"):
        raise Malformed("Capacity Block expiration warning without a valid detail.capacity-reservation-id")
    noticed, assumed = event_time(event.get("time"), now)
    end = parse_time(detail["end-date"]) if detail.get("end-date") else None
    return Parsed((CapacityBlockWarning(reservation, noticed, end, reference, assumed),))


def _detail(detail: Any, detail_type: str) -> dict[str, Any]:
    if not isinstance(detail, dict):
        raise Malformed(f"{detail_type} without a detail object")
    return detail


def _instance_id(value: Any, detail_type: str) -> str:
    if not isinstance(value, str) or not value.startswith("i-"):
        raise Malformed(f"{detail_type} without a valid detail.instance-id")
    return value
