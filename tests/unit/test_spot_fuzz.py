"""Property tests for the Spot notice parsers: whatever arrives in the queue, from IMDS or in a Spot request,
the parser returns a notice, ``None`` (another event) or raises Malformed, which the sources report. Any
other exception would take the Spot checks down with it (the queue is written by whoever can send to it)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmdoctor.spot.notices import (
    INTERRUPTION_EVENT,
    REBALANCE_EVENT,
    Malformed,
    SpotNotice,
    parse_imds_instance_action,
    parse_imds_rebalance,
    parse_message,
    parse_spot_request,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
FUZZ = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
              st.sampled_from(["terminate", "stop", "i-0abc", "2025-03-01T12:00:00Z", "not-a-time", "1e309", ""])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=10,
)
ANY = st.one_of(JSON, st.sampled_from([INTERRUPTION_EVENT, REBALANCE_EVENT, "Notification"]))
TIMES = st.one_of(ANY, st.datetimes().map(lambda d: d.isoformat()), st.sampled_from(
    ["2025-03-01T12:00:00Z", "2025-03-01T12:00:00+05:30", "2025-03-01 12:00", "9999-12-31T23:59:59Z",
     "0001-01-01T00:00:00-01:00", "2025-02-30T00:00:00Z"]))


def event_like() -> st.SearchStrategy[dict]:
    """EventBridge-shaped events whose every field may have the wrong type or value."""
    detail = st.fixed_dictionaries({}, optional={"instance-id": st.one_of(ANY, st.just("i-0abc1234567890def")),
                                                 "instance-action": ANY})
    return st.fixed_dictionaries({}, optional={
        "detail-type": st.one_of(ANY, st.sampled_from([INTERRUPTION_EVENT, REBALANCE_EVENT])),
        "detail": st.one_of(ANY, detail), "time": TIMES, "Type": ANY, "Message": ANY,
    })


def outcome(parse, *args):
    try:
        return parse(*args)
    except Malformed:
        return Malformed


@FUZZ
@given(st.one_of(st.text(max_size=200), st.builds(json.dumps, JSON)))
def test_any_message_body_is_a_notice_none_or_malformed(body):
    result = outcome(parse_message, body, "m-1")
    assert result is None or result is Malformed or isinstance(result, SpotNotice)


@FUZZ
@given(event_like(), st.booleans())
def test_any_event_shape_is_a_notice_none_or_malformed(event, wrap_in_sns):
    body = json.dumps(event)
    if wrap_in_sns:
        body = json.dumps({"Type": "Notification", "Message": body})
    result = outcome(parse_message, body, "m-1")
    assert result is None or result is Malformed or isinstance(result, SpotNotice)
    if isinstance(result, SpotNotice):  # only a well-formed event becomes a notice
        assert result.instance_id.startswith("i-") and result.noticed_at.tzinfo is not None


@FUZZ
@given(st.one_of(st.text(max_size=100), st.builds(json.dumps, st.fixed_dictionaries(
    {}, optional={"action": ANY, "time": TIMES, "noticeTime": TIMES}))))
def test_any_imds_reply_is_a_notice_or_malformed(text):
    results = (outcome(parse_imds_instance_action, text, "i-0abc", NOW), outcome(parse_imds_rebalance, text, "i-0abc"))
    for result in results:
        assert result is Malformed or isinstance(result, SpotNotice)


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
