"""The delivery ledgers: one replica's memory (Ledger) and the DynamoDB table replicas share (SharedLedger),
the latter against moto's DynamoDB with conditional writes."""

from __future__ import annotations

import logging

import pytest

from fmdoctor.serve.dedupe import SharedLedger, create_table
from fmdoctor.serve.state import Ledger

TABLE = "fmdoctor-serve-dedupe"


class Clock:
    def __init__(self, start: float = 1_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def test_ledger_forgets_after_its_ttl_and_keeps_at_most_max_size():
    clock = Clock()
    ledger = Ledger(ttl_s=60, max_size=2, clock=clock)
    ledger.mark("a")
    clock.now += 30
    ledger.mark("b")
    ledger.mark("c")  # over max_size: the oldest goes first
    assert (ledger.done("a"), ledger.done("b"), ledger.done("c")) == (False, True, True)
    clock.now += 31  # b and c are 31s old, a TTL of 60s keeps them
    assert ledger.done("b")
    clock.now += 30
    assert not ledger.done("b") and not ledger.done("c")


def test_ledger_claims_are_exclusive_until_released():
    ledger = Ledger()
    assert ledger.claim("e-1") and not ledger.claim("e-1") and ledger.claim("e-2")
    ledger.release("e-1")
    assert ledger.claim("e-1")


@pytest.fixture
def table(aws):
    dynamodb = aws.client("dynamodb")
    create_table(dynamodb, TABLE)
    return dynamodb


def replicas(dynamodb, clock, lease_s=120.0):
    return (SharedLedger(dynamodb, TABLE, lease_s, clock=clock, owner="replica-a"),
            SharedLedger(dynamodb, TABLE, lease_s, clock=clock, owner="replica-b"))


def test_one_replica_holds_an_event_and_the_other_sees_it_delivered(table):
    a, b = replicas(table, Clock())
    try:
        assert a.claim("ev-1")
        assert not b.claim("ev-1")  # A's lease is live: B leaves its copy on the queue
        a.mark("ev-1:slack")
        a.mark("ev-1")
        a.release("ev-1")
        assert "Item" not in table.get_item(TableName=TABLE, Key={"pk": {"S": "claim#ev-1"}})  # released
        assert b.claim("ev-1") and b.done("ev-1") and b.done("ev-1:slack")  # acknowledged as a duplicate
        assert not b.done("ev-2")
        item = table.get_item(TableName=TABLE, Key={"pk": {"S": "done#ev-1"}})["Item"]
        assert int(item["expires_at"]["N"]) - int(item["at"]["N"]) == 24 * 3600  # DynamoDB TTL drops it
    finally:
        a.close()
        b.close()


def test_a_dead_replicas_lease_runs_out_and_another_takes_the_event(table, caplog):
    clock = Clock()
    a, b = replicas(table, clock, lease_s=120)
    try:
        assert a.claim("ev-1")
        clock.now += 60
        assert a.renew_due() == [] and not b.claim("ev-1")  # renewed while A works
        clock.now += 119
        assert not b.claim("ev-1")  # the renewed lease still holds
        clock.now += 2  # A died: nothing renewed, the lease ran out with its message's visibility
        assert b.claim("ev-1")
        caplog.set_level(logging.WARNING, "fmdoctor.serve")
        assert a.holds("ev-1")
        assert a.renew_due() == ["ev-1"]  # had A only been slow, it learns it lost the event
        assert not a.holds("ev-1") and b.holds("ev-1")  # so A's processor does not post it too
        assert "another replica took it" in caplog.text
        a.release("ev-1")  # A's late release does not drop B's claim
        assert not a.claim("ev-1")
    finally:
        a.close()
        b.close()


def test_a_failing_table_leaves_no_local_claim_behind(table):
    ledger = SharedLedger(table, "no-such-table", clock=Clock())
    with pytest.raises(table.exceptions.ResourceNotFoundException):
        ledger.claim("ev-1")
    assert Ledger.claim(ledger, "ev-1")  # the in-memory claim was given back


def test_an_alarms_slack_thread_is_shared_within_its_window(table):
    clock = Clock()
    a, b = replicas(table, clock)
    a.remember_thread("alarm:gpu-util", "1700000000.000100", window_s=3600)
    assert b.thread_of("alarm:gpu-util", 3600) == "1700000000.000100"
    assert b.thread_of("alarm:other", 3600) is None
    clock.now += 3601  # past serve.repeat_window: the alarm opens a new message
    assert b.thread_of("alarm:gpu-util", 3600) is None


def test_serve_stops_at_start_when_its_dedupe_table_cannot_be_read(aws, tmp_path, capsys):
    from fmdoctor.cli.main import main

    config = tmp_path / "fmdoctor.yaml"
    config.write_text("clusters:\n  llm-train: {}\nserve:\n"
                      "  queue_url: https://sqs.us-west-2.amazonaws.com/123456789012/fmdoctor-events\n"
                      "  dedupe_table: no-such-table\n")
    assert main(["serve", "--config", str(config), "--no-http", "--region", "us-west-2"]) == 3
    err = capsys.readouterr().err
    assert "serve.dedupe_table 'no-such-table' cannot be read (ResourceNotFoundException" in err
    assert "dedupe-table.cfn.yaml" in err
