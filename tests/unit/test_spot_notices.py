"""Spot notice parsing and time logic, with the documented shapes of EventBridge, SNS, IMDS and EC2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.spot.notices import (
    INTERRUPTION,
    REBALANCE,
    Malformed,
    parse_imds_instance_action,
    parse_imds_rebalance,
    parse_message,
    parse_spot_request,
    parse_time,
)

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def event(detail_type="EC2 Spot Instance Interruption Warning", time="2025-03-01T11:59:30Z", **detail):
    detail = detail or {"instance-id": "i-0abc1234567890def", "instance-action": "terminate"}
    return json.dumps({"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602", "detail-type": detail_type,
                       "source": "aws.ec2", "account": "123456789012", "time": time, "region": "us-west-2",
                       "resources": ["arn:aws:ec2:us-west-2a:instance/i-0abc1234567890def"], "detail": detail})


def test_interruption_warning_from_eventbridge():
    notice = parse_message(event(), reference="m-1")
    assert (notice.kind, notice.source, notice.instance_id, notice.action) == (
        INTERRUPTION, "sqs", "i-0abc1234567890def", "terminate")
    assert notice.action_time == datetime(2025, 3, 1, 12, 1, 30, tzinfo=UTC)  # two minutes after the warning
    assert notice.seconds_left(NOW) == 90 and notice.reference == "m-1"


def test_rebalance_recommendation_and_sns_envelope():
    body = json.dumps({"Type": "Notification", "MessageId": "x", "Message": event(
        "EC2 Instance Rebalance Recommendation", **{"instance-id": "i-0abc1234567890def"})})
    notice = parse_message(body)
    assert notice.kind == REBALANCE and notice.action is None and notice.action_time is None


def test_other_events_are_not_notices():
    assert parse_message(event("EC2 Instance State-change Notification", **{"instance-id": "i-1", "state": "x"})) \
        is None


@pytest.mark.parametrize(
    "body, message",
    [
        ("not json at all", "not JSON"),
        ("[1, 2]", "not an object"),
        (json.dumps({"hello": "world"}), "no detail-type"),
        (json.dumps({"detail-type": "EC2 Spot Instance Interruption Warning", "detail": "oops"}),
         "without a detail object"),
        (event(**{"instance-id": 42, "instance-action": "terminate"}), "instance-id"),
        (event(**{"instance-id": "i-0abc1234567890def", "instance-action": "explode"}), "instance-action"),
        (event(time="yesterday"), "ISO 8601"),
        (event(time=None), "ISO 8601"),
        (json.dumps({"Type": "Notification", "Message": "{broken"}), "SNS message is not JSON"),
    ],
    ids=["text", "list", "no-detail-type", "bad-detail", "bad-instance", "bad-action", "bad-time", "no-time",
         "bad-sns"],
)
def test_malformed_messages_raise_malformed(body, message):
    with pytest.raises(Malformed, match=message):
        parse_message(body)


def test_times_with_offsets_and_without_a_zone_are_utc():
    assert parse_time("2025-03-01T13:00:00+01:00") == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    assert parse_time("2025-03-01T12:00:00") == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    assert parse_time("2025-03-01T12:00:00.123Z").microsecond == 123000


def test_clock_skew_never_promises_more_than_two_minutes_or_less_than_zero():
    # Our clock is 3 minutes slow: the warning looks like it is from the future.
    notice = parse_message(event(time="2025-03-01T12:03:00Z"))
    assert notice.seconds_left(NOW) == 120
    assert not notice.clock_skew_suspected(NOW) and notice.is_current(NOW)
    assert parse_message(event(time="2025-03-01T12:30:00Z")).clock_skew_suspected(NOW)
    # Our clock is fast: the action time has just passed, and the node is still being interrupted.
    late = parse_message(event(time="2025-03-01T11:54:00Z"))
    assert late.seconds_left(NOW) == 0 and late.is_current(NOW)


def test_stale_notices_are_not_current():
    assert not parse_message(event(time="2025-03-01T11:40:00Z")).is_current(NOW)  # acted on 18 minutes ago
    rebalance = parse_message(event("EC2 Instance Rebalance Recommendation", time="2025-02-27T08:00:00Z",
                                    **{"instance-id": "i-0abc1234567890def"}))
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
                            "request-canceled-and-instance-running"):
        assert parse_spot_request(_request(not_interrupted)) is None
