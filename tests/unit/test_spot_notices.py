"""Interruption notice parsing and time logic, on aws-node-termination-handler's own test events and the
sample events in AWS's documentation (tests/fixtures/events, sources in its README)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fmdoctor.spot.ec2 import (
    parse_imds_instance_action,
    parse_imds_rebalance,
    parse_imds_scheduled,
    parse_instance_status,
    parse_spot_request,
)
from fmdoctor.spot.events import LIFECYCLE, OTHER, TEST, parse_message
from fmdoctor.spot.notices import (
    CAPACITY_RESERVATION,
    INTERRUPTION,
    REBALANCE,
    SCHEDULED,
    CapacityBlockWarning,
    Malformed,
    parse_time,
)

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
EVENTS = Path(__file__).resolve().parent.parent / "fixtures" / "events"


def fixture(name: str, **changes) -> dict:
    event = json.loads((EVENTS / f"{name}.json").read_text())
    detail = changes.pop("detail", None)
    event.update(changes)
    if detail:
        event["detail"] = {**event["detail"], **detail}
    return event


def parse(event: dict, reference: str = "m-1"):
    return parse_message(json.dumps(event), reference, NOW)


def test_spot_interruption_warning_from_nth_fixture():
    [notice] = parse(fixture("nth-spot-itn", time="2025-03-01T11:59:30Z")).notices
    assert (notice.kind, notice.source, notice.instance_id, notice.action) == (
        INTERRUPTION, "sqs", "i-0b662ef9931388ba0", "terminate")
    assert notice.action_time == datetime(2025, 3, 1, 12, 1, 30, tzinfo=UTC)  # two minutes after the warning
    assert notice.seconds_left(NOW) == 90 and notice.reference == "m-1" and not notice.time_assumed


def test_nths_own_epoch_time_is_an_interruption_long_past():
    [notice] = parse(fixture("nth-spot-itn")).notices  # time 1970-01-01T00:00:00Z, as NTH's test has it
    assert notice.noticed_at.year == 1970 and not notice.is_current(NOW)


def test_an_interruption_warning_with_an_empty_time_means_now():
    """NTH's EventBridgeEvent.getTime reads an empty time as the current time (TestGetTime_Empty)."""
    [notice] = parse(fixture("nth-spot-itn-no-time")).notices
    assert notice.noticed_at == NOW and notice.time_assumed and notice.seconds_left(NOW) == 120
    assert "read as the moment it was read" in notice.to_evidence(NOW)["time_assumed"]
    [absent] = parse({k: v for k, v in fixture("nth-spot-itn").items() if k != "time"}).notices
    assert absent.noticed_at == NOW


def test_rebalance_recommendation_and_sns_envelope():
    body = json.dumps({"Type": "Notification", "MessageId": "x", "Message": json.dumps(fixture("nth-rebalance"))})
    [notice] = parse_message(body, "m-2", NOW).notices
    assert notice.kind == REBALANCE and notice.action is None and notice.action_time is None


@pytest.mark.parametrize(
    "name, category",
    [
        ("nth-asg-lifecycle-direct", LIFECYCLE),
        ("nth-asg-test-notification-direct", TEST),
        ("aws-asg-lifecycle-sqs", LIFECYCLE),
        ("aws-asg-test-notification-sqs", TEST),
        ("nth-asg-lifecycle-eventbridge", OTHER),
        ("nth-asg-test-notification-eventbridge", OTHER),
        ("nth-state-change", OTHER),
    ],
)
def test_what_the_termination_handlers_queue_also_carries_is_ignored_quietly(name, category):
    """Auto Scaling lifecycle-hook messages (straight to SQS or via EventBridge), test notifications and
    state-change events are not interruptions, and not malformed either."""
    parsed = parse(fixture(name))
    assert parsed.notices == () and parsed.ignored == category
    wrapped = parse_message(json.dumps({"Type": "Notification", "Message": json.dumps(fixture(name))}), "m", NOW)
    assert wrapped.ignored == category


def test_aws_health_scheduled_change_from_nth_fixture():
    [notice] = parse(fixture("nth-scheduled-change")).notices
    assert (notice.instance_id, notice.cause, notice.action) == ("i-12345678", SCHEDULED, "maintenance")
    assert notice.action_time == datetime(2016, 6, 5, 15, 10, 9, tzinfo=UTC)  # startTime, RFC 1123
    assert notice.detail == "AWS Health AWS_EC2_DEDICATED_HOST_NETWORK_MAINTENANCE_SCHEDULED"
    assert notice.lead is None  # days of notice: never capped at two minutes
    retirement = fixture("nth-scheduled-change", detail={"eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED"})
    assert parse(retirement).notices[0].action == "retire"
    for other in ({"service": "RDS"}, {"eventTypeCategory": "issue"}, {"statusCode": "closed"}):
        assert parse(fixture("nth-scheduled-change", detail=other)).ignored == OTHER


def test_interruptible_capacity_reservation_warning_from_the_ec2_user_guide():
    [notice] = parse(fixture("aws-capacity-reservation-interruption-warning")).notices
    assert (notice.kind, notice.cause) == (INTERRUPTION, CAPACITY_RESERVATION)
    assert notice.instance_id == "i-0b662ef9931388ba0"
    assert notice.action_time == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)  # instance-termination-time
    assert notice.seconds_left(datetime(2025, 3, 1, 11, 58, 30, tzinfo=UTC)) == 90


def test_capacity_block_expiration_warning_from_the_ec2_user_guide():
    [warning] = parse(fixture("aws-capacity-block-expiration-warning")).notices
    assert isinstance(warning, CapacityBlockWarning)
    assert warning.reservation_id == "cr-0123456789abcdef0"
    assert warning.end_date == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    # The envelope as EventBridge delivers it ('detail-type') reads the same, under either name the guide used.
    enveloped = {k: v for k, v in fixture("aws-capacity-block-expiration-warning").items() if k != "detail_type"}
    for name in ("Capacity Block Reservation Expiration Warning", "Capacity Block Expiration Warning"):
        assert parse({**enveloped, "detail-type": name}).notices[0].reservation_id == "cr-0123456789abcdef0"


@pytest.mark.parametrize(
    "body, message",
    [
        ("not json at all", "not JSON"),
        ("[1, 2]", "not an object"),
        (json.dumps({"hello": "world"}), "neither an EventBridge event"),
        (json.dumps({"detail-type": "EC2 Spot Instance Interruption Warning", "detail": "oops"}),
         "without a detail object"),
        (json.dumps(fixture("nth-spot-itn", detail={"instance-id": 42})), "instance-id"),
        (json.dumps(fixture("nth-spot-itn", detail={"instance-action": "explode"})), "instance-action"),
        (json.dumps(fixture("nth-spot-itn", time="yesterday")), "ISO 8601"),
        (json.dumps({"Type": "Notification", "Message": "{broken"}), "SNS message is not JSON"),
        (json.dumps(fixture("aws-capacity-block-expiration-warning", detail={"capacity-reservation-id": "x"})),
         "capacity-reservation-id"),
    ],
    ids=["text", "list", "unknown-shape", "bad-detail", "bad-instance", "bad-action", "bad-time", "bad-sns",
         "bad-reservation"],
)
def test_malformed_messages_raise_malformed(body, message):
    with pytest.raises(Malformed, match=message):
        parse_message(body, "m", NOW)


def test_times_with_offsets_and_without_a_zone_are_utc():
    assert parse_time("2025-03-01T13:00:00+01:00") == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    assert parse_time("2025-03-01T12:00:00") == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    assert parse_time("2025-03-01T12:00:00.123Z").microsecond == 123000


def test_clock_skew_never_promises_more_than_two_minutes_or_less_than_zero():
    # Our clock is 3 minutes slow: the warning looks like it is from the future.
    [notice] = parse(fixture("nth-spot-itn", time="2025-03-01T12:03:00Z")).notices
    assert notice.seconds_left(NOW) == 120
    assert not notice.clock_skew_suspected(NOW) and notice.is_current(NOW)
    assert parse(fixture("nth-spot-itn", time="2025-03-01T12:30:00Z")).notices[0].clock_skew_suspected(NOW)
    # Our clock is fast: the action time has just passed, and the node is still being interrupted.
    [late] = parse(fixture("nth-spot-itn", time="2025-03-01T11:54:00Z")).notices
    assert late.seconds_left(NOW) == 0 and late.is_current(NOW)


def test_stale_notices_are_not_current():
    assert not parse(fixture("nth-spot-itn", time="2025-03-01T11:40:00Z")).notices[0].is_current(NOW)
    [rebalance] = parse(fixture("nth-rebalance", time="2025-02-27T08:00:00Z")).notices
    assert rebalance.is_current(NOW)  # still running on the capacity EC2 warned about
    # Issued before the instance was last (re)started: from an earlier life of a stop/start Spot instance.
    assert not rebalance.is_current(NOW, launch_time=datetime(2025, 2, 28, 0, 0, tzinfo=UTC))


def test_imds_replies():
    action = parse_imds_instance_action('{"action": "stop", "time": "2025-03-01T12:01:00Z"}', "i-1", NOW)
    assert (action.action, action.seconds_left(NOW), action.source) == ("stop", 60, "imds")
    assert parse_imds_rebalance('{"noticeTime": "2025-03-01T11:30:00Z"}', "i-1").noticed_at.hour == 11
    for bad in ("<html>503</html>", '{"action": "terminate"}', '{"action": "reboot", "time": "2025-03-01T12:01Z"}'):
        with pytest.raises(Malformed):
            parse_imds_instance_action(bad, "i-1", NOW)
    with pytest.raises(Malformed):
        parse_imds_rebalance("{}", "i-1")


def test_imds_scheduled_events_as_the_user_guide_shows_them():
    """events/maintenance/scheduled (EC2 user guide, 'View scheduled events': instance metadata sample)."""
    reply = json.dumps([
        {"NotBefore": "04 Mar 2025 09:00:43 GMT", "Code": "system-reboot",
         "Description": "scheduled reboot", "EventId": "instance-event-0d59937288b749b32",
         "NotAfter": "04 Mar 2025 09:17:23 GMT", "State": "active"},
        {"NotBefore": "20 Feb 2025 09:00:00 GMT", "Code": "system-reboot", "Description": "done",
         "EventId": "instance-event-0aa", "NotAfter": "20 Feb 2025 10:00:00 GMT", "State": "completed"},
    ])
    [notice] = parse_imds_scheduled(reply, "i-1", NOW)
    assert (notice.action, notice.cause, notice.reference) == ("reboot", SCHEDULED, "instance-event-0d59937288b749b32")
    assert notice.action_time == datetime(2025, 3, 4, 9, 0, 43, tzinfo=UTC)
    assert notice.window_end == datetime(2025, 3, 4, 9, 17, 23, tzinfo=UTC)
    for bad in ("{}", "not json", json.dumps([{"Code": "system-reboot", "NotBefore": "whenever"}])):
        with pytest.raises(Malformed):
            parse_imds_scheduled(bad, "i-1", NOW)


def test_describe_instance_status_scheduled_events():
    """API_InstanceStatusEvent: a [Completed] or [Canceled] description is history; a window under way is current."""
    status = {"InstanceId": "i-1", "Events": [
        {"InstanceEventId": "instance-event-1", "Code": "instance-retirement",
         "Description": "The instance is running on degraded hardware",
         "NotBefore": NOW + timedelta(days=3), "NotAfter": NOW + timedelta(days=4)},
        {"InstanceEventId": "instance-event-2", "Code": "system-maintenance", "Description": "[Completed] done",
         "NotBefore": NOW - timedelta(days=1)},
        {"InstanceEventId": "instance-event-3", "Code": "system-maintenance", "Description": "[Canceled] no",
         "NotBefore": NOW + timedelta(days=1)},
    ]}
    [notice] = parse_instance_status(status, NOW)
    assert (notice.action, notice.seconds_left(NOW)) == ("retire", 3 * 86400)
    during = {"InstanceId": "i-1", "Events": [{"Code": "system-maintenance", "Description": "host maintenance",
                                                "NotBefore": NOW - timedelta(minutes=30),
                                                "NotAfter": NOW + timedelta(hours=1)}]}
    assert parse_instance_status(during, NOW)[0].is_current(NOW)


def _request(code, update=NOW - timedelta(seconds=30)):
    return {"SpotInstanceRequestId": "sir-1", "InstanceId": "i-1", "State": "active",
            "Status": {"Code": code, "Message": "m", "UpdateTime": update}}


def test_spot_request_status_codes():
    marked = parse_spot_request(_request("marked-for-termination"))
    assert (marked.action, marked.seconds_left(NOW), marked.detail) == ("terminate", 90, "marked-for-termination: m")
    assert parse_spot_request(_request("marked-for-stop")).action == "stop"
    by_price = parse_spot_request(_request("instance-terminated-by-price"))
    assert by_price.action == "terminate" and by_price.seconds_left(NOW) == 0  # happening now
    for not_interrupted in ("fulfilled", "instance-terminated-by-user", "instance-stopped-by-user",
                            "request-canceled-and-instance-running",
                            "instance-terminated-by-service"):  # a stopped instance terminated: nothing runs
        assert parse_spot_request(_request(not_interrupted)) is None
