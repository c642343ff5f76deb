"""Property tests for the interruption notice parsers: whatever arrives in the queue, from IMDS, in a Spot
request or an instance status, the parser returns notices (maybe none: another event) or raises Malformed,
which the sources report. Any other exception would take the checks down with it (the queue is written by
whoever can send to it)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmdoctor.spot.ec2 import (
    parse_imds_instance_action,
    parse_imds_rebalance,
    parse_imds_scheduled,
    parse_instance_status,
    parse_spot_request,
)
from fmdoctor.spot.events import (
    CAPACITY_BLOCK_EXPIRY_EVENTS,
    CAPACITY_RESERVATION_INTERRUPTION_EVENT,
    HEALTH_EVENT,
    INTERRUPTION_EVENT,
    REBALANCE_EVENT,
    Parsed,
    parse_message,
)
from fmdoctor.spot.notices import CapacityBlockWarning, Malformed, SpotNotice

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
              st.sampled_from(["terminate", "stop", "i-0abc", "2025-03-01T12:00:00Z", "not-a-time", "1e309", ""])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=10,
)
KINDS = [INTERRUPTION_EVENT, REBALANCE_EVENT, CAPACITY_RESERVATION_INTERRUPTION_EVENT, HEALTH_EVENT,
         *CAPACITY_BLOCK_EXPIRY_EVENTS]
ANY = st.one_of(JSON, st.sampled_from([*KINDS, "Notification", "EC2", "scheduledChange", "cr-0abc",
                                       "autoscaling:TEST_NOTIFICATION", "Sat, 05 Jun 2016 15:10:09 GMT"]))
TIMES = st.one_of(ANY, st.datetimes().map(lambda d: d.isoformat()), st.sampled_from(
    ["2025-03-01T12:00:00Z", "2025-03-01T12:00:00+05:30", "2025-03-01 12:00", "9999-12-31T23:59:59Z",
     "0001-01-01T00:00:00-01:00", "2025-02-30T00:00:00Z"]))


def event_like() -> st.SearchStrategy[dict]:
    """EventBridge-shaped events whose every field may have the wrong type or value."""
    detail = st.fixed_dictionaries({}, optional={
        "instance-id": st.one_of(ANY, st.just("i-0abc1234567890def")), "instance-action": ANY,
        "instance-termination-time": TIMES, "capacity-reservation-id": ANY, "end-date": TIMES, "service": ANY,
        "eventTypeCategory": ANY, "eventTypeCode": ANY, "startTime": TIMES, "endTime": TIMES,
        "affectedEntities": st.one_of(ANY, st.lists(st.fixed_dictionaries({"entityValue": ANY}), max_size=2)),
    })
    return st.fixed_dictionaries({}, optional={
        "detail-type": st.one_of(ANY, st.sampled_from(KINDS)),
        "detail": st.one_of(ANY, detail), "time": TIMES, "Type": ANY, "Message": ANY, "resources": ANY,
        "LifecycleTransition": ANY, "Event": ANY,
    })


def outcome(parse, *args):
    try:
        return parse(*args)
    except Malformed:
        return Malformed


def _parsed_or_malformed(result) -> bool:
    return result is Malformed or (isinstance(result, Parsed) and all(
        isinstance(n, SpotNotice | CapacityBlockWarning) for n in result.notices))


@FUZZ
@given(st.one_of(st.text(max_size=200), st.builds(json.dumps, JSON)))
def test_any_message_body_is_parsed_or_malformed(body):
    assert _parsed_or_malformed(outcome(parse_message, body, "m-1", NOW))


@FUZZ
@given(event_like(), st.booleans())
def test_any_event_shape_is_parsed_or_malformed(event, wrap_in_sns):
    body = json.dumps(event)
    if wrap_in_sns:
        body = json.dumps({"Type": "Notification", "Message": body})
    result = outcome(parse_message, body, "m-1", NOW)
    assert _parsed_or_malformed(result)
    for notice in getattr(result, "notices", ()):  # only a well-formed event becomes a notice
        if isinstance(notice, SpotNotice):
            assert notice.instance_id.startswith("i-") and notice.noticed_at.tzinfo is not None
        else:
            assert notice.reservation_id.startswith("cr-")


@FUZZ
@given(st.one_of(st.text(max_size=100), st.builds(json.dumps, st.fixed_dictionaries(
    {}, optional={"action": ANY, "time": TIMES, "noticeTime": TIMES}))))
def test_any_imds_reply_is_a_notice_or_malformed(text):
    results = (outcome(parse_imds_instance_action, text, "i-0abc", NOW), outcome(parse_imds_rebalance, text, "i-0abc"))
    for result in results:
        assert result is Malformed or isinstance(result, SpotNotice)
    scheduled = outcome(parse_imds_scheduled, text, "i-0abc", NOW)
    assert scheduled is Malformed or all(isinstance(n, SpotNotice) for n in scheduled)


@FUZZ
@given(st.lists(st.one_of(ANY, st.fixed_dictionaries({}, optional={
    "Code": st.one_of(ANY, st.sampled_from(["system-reboot", "instance-retirement"])), "NotBefore": TIMES,
    "NotAfter": TIMES, "State": ANY, "Description": ANY, "EventId": ANY})), max_size=3))
def test_any_scheduled_event_list_is_notices_or_malformed(events):
    for result in (outcome(parse_imds_scheduled, json.dumps(events), "i-0abc", NOW),
                   outcome(parse_instance_status, {"InstanceId": "i-0abc", "Events": events}, NOW)):
        assert result is Malformed or all(isinstance(n, SpotNotice) for n in result)


@FUZZ
@given(st.fixed_dictionaries({}, optional={
    "InstanceId": ANY, "SpotInstanceRequestId": ANY,
    "Status": st.one_of(ANY, st.fixed_dictionaries({}, optional={
        "Code": st.one_of(ANY, st.sampled_from(["marked-for-termination", "instance-terminated-by-price",
                                                "instance-stopped-by-user"])),
        "UpdateTime": TIMES, "Message": ANY})),
}))
def test_any_spot_request_entry_is_a_notice_none_or_malformed(raw):
    result = outcome(parse_spot_request, raw)
    assert result is None or result is Malformed or isinstance(result, SpotNotice)
