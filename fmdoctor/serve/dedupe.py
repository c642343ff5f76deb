"""Idempotency across replicas: a DynamoDB table (``serve.dedupe_table``) that every replica on one queue shares.

The in-memory :class:`~fmdoctor.serve.state.Ledger` stops one replica from posting an event twice. Two replicas
on one queue need more: EventBridge may deliver an event twice (two SQS messages with the same event id, which
two replicas can receive at once), and a replica that posted but died before DeleteMessage leaves its message to
come back to another. The table holds two kinds of item, keyed ``pk``:

* ``claim#<event id>``: the replica working on the event, until ``lease_until`` (epoch seconds). Taken with a
  conditional PutItem (``attribute_not_exists(pk) OR lease_until < :now``), so only one replica wins; renewed
  while the investigation runs (a third of the lease); deleted when the worker is done. A replica that dies
  stops renewing: the lease runs out about when its message's visibility timeout does, and the next replica to
  receive the message takes the claim.
* ``done#<key>``: an event (or one of its outputs) that has its result, so any replica acknowledges a redelivery
  without posting again.
* ``thread#<repeat key>``: the Slack message an alarm opened, so its repeat on any replica within
  ``serve.repeat_window`` updates that message and answers in its thread.

Each item carries ``expires_at`` for DynamoDB's TTL (``deploy/serve/dedupe-table.cfn.yaml`` enables it), so the
table does not grow. Reads are strongly consistent: a ``done`` written by one replica is seen by the next read
of another. DynamoDB's conditional writes: docs.aws.amazon.com/amazondynamodb/latest/developerguide/
Expressions.ConditionExpressions.html; TTL: .../TTL.html.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from fmdoctor.serve.state import Ledger

log = logging.getLogger("fmdoctor.serve")

DEDUPE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem")
# The table's key and TTL attribute, as deploy/serve/dedupe-table.cfn.yaml creates it (a test holds the two equal).
TABLE_KEY = {"AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
             "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}]}
TTL_ATTRIBUTE = "expires_at"


def create_table(dynamodb: Any, name: str) -> None:
    """The table as the CloudFormation template makes it (on-demand, TTL on): for tests and local trials."""
    dynamodb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST", **TABLE_KEY)
    dynamodb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True,
                                                                          "AttributeName": TTL_ATTRIBUTE})


class SharedLedger(Ledger):
    """The :class:`Ledger` interface over a DynamoDB table, with this replica's memory in front of it."""

    def __init__(self, dynamodb: Any, table: str, lease_s: float = 120, ttl_s: float = 24 * 3600,
                 clock: Callable[[], float] = time.time, owner: str | None = None):
        super().__init__(ttl_s=ttl_s)
        self.dynamodb, self.table, self.lease_s, self.wall = dynamodb, table, lease_s, clock
        self.owner = owner or f"{uuid.uuid4().hex[:12]}"
        self._held: dict[str, float] = {}  # event id -> when its lease was last written (wall clock)
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def probe(self) -> None:
        """One read at start-up, so a missing table or grant stops the service with its reason instead of failing
        every event into the dead-letter queue."""
        self.dynamodb.get_item(TableName=self.table, Key={"pk": {"S": "probe#fmdoctor"}}, ProjectionExpression="pk")

    def done(self, key: str) -> bool:
        if super().done(key):
            return True
        item = self.dynamodb.get_item(TableName=self.table, Key={"pk": {"S": f"done#{key}"}},
                                      ConsistentRead=True, ProjectionExpression="pk").get("Item")
        if item:
            super().mark(key)  # remembered here too: the next redelivery costs no read
        return bool(item)

    def mark(self, key: str) -> None:
        now = self.wall()
        self.dynamodb.put_item(TableName=self.table, Item={
            "pk": {"S": f"done#{key}"}, "owner": {"S": self.owner}, "at": {"N": str(int(now))},
            TTL_ATTRIBUTE: {"N": str(int(now + self.ttl_s))}})
        super().mark(key)

    def claim(self, key: str) -> bool:
        """False while another worker, here or in another replica, holds an unexpired lease on the event; True
        also when the event is already done (the processor then acknowledges it as a duplicate)."""
        if not super().claim(key):
            return False
        try:
            if self._put_claim(key):
                with self._held_lock:
                    self._held[key] = self.wall()
                self._start_renewer()
                return True
            finished = self.done(key)  # another replica delivered it: acknowledged as a duplicate, not retried
        except Exception:
            super().release(key)
            raise
        if not finished:
            super().release(key)
        return finished

    def release(self, key: str) -> None:
        with self._held_lock:
            held = self._held.pop(key, None) is not None
        if held:
            try:
                self.dynamodb.delete_item(TableName=self.table, Key={"pk": {"S": f"claim#{key}"}},
                                          ConditionExpression="#o = :me", ExpressionAttributeNames={"#o": "owner"},
                                          ExpressionAttributeValues={":me": {"S": self.owner}})
            except Exception as exc:  # taken over meanwhile, or throttled: its lease runs out by itself
                log.debug("could not release the claim on %s: %s", key, type(exc).__name__)
        super().release(key)

    def holds(self, key: str) -> bool:
        """False once another replica took the event over (this one's lease ran out unrenewed)."""
        with self._held_lock:
            return key in self._held

    def close(self) -> None:
        self._stop.set()

    def thread_of(self, repeat_key: str, window_s: float) -> str | None:
        """The Slack message a replica opened for this alarm within ``window_s`` (``thread#<repeat key>``)."""
        item = self.dynamodb.get_item(TableName=self.table, Key={"pk": {"S": f"thread#{repeat_key}"}},
                                      ConsistentRead=True).get("Item")
        if item and self.wall() - float(item["at"]["N"]) <= window_s:
            return str(item["ts"]["S"])
        return None

    def remember_thread(self, repeat_key: str, ts: str, window_s: float) -> None:
        now = self.wall()
        self.dynamodb.put_item(TableName=self.table, Item={
            "pk": {"S": f"thread#{repeat_key}"}, "ts": {"S": ts}, "at": {"N": str(now)},
            TTL_ATTRIBUTE: {"N": str(int(now + window_s))}})

    def _put_claim(self, key: str, renew: bool = False) -> bool:
        now = self.wall()
        condition = "#o = :me" if renew else "attribute_not_exists(pk) OR lease_until < :now OR #o = :me"
        values: dict[str, Any] = {":me": {"S": self.owner}}
        if not renew:
            values[":now"] = {"N": str(now)}
        try:
            self.dynamodb.put_item(
                TableName=self.table, ConditionExpression=condition,
                ExpressionAttributeNames={"#o": "owner"}, ExpressionAttributeValues=values,
                Item={"pk": {"S": f"claim#{key}"}, "owner": {"S": self.owner},
                      "lease_until": {"N": str(now + self.lease_s)},
                      TTL_ATTRIBUTE: {"N": str(int(now + self.ttl_s))}})
            return True
        except self.dynamodb.exceptions.ConditionalCheckFailedException:
            return False

    def _start_renewer(self) -> None:
        with self._held_lock:
            if self._renewer is not None and self._renewer.is_alive():
                return
            self._renewer = threading.Thread(target=self._renew, name="fmdoctor-serve-leases", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        every = max(0.2, self.lease_s / 3)
        while not self._stop.wait(min(every, 1.0)):
            self.renew_due()

    def renew_due(self) -> list[str]:
        """Extend this replica's leases a third of the way into them, as the SQS heartbeat extends visibility;
        the events whose claim another replica took over meanwhile (their lease had run out) are dropped."""
        every = max(0.2, self.lease_s / 3)
        now = self.wall()
        with self._held_lock:
            due = [k for k, at in self._held.items() if now - at >= every]
        lost = []
        for key in due:
            try:
                kept = self._put_claim(key, renew=True)
            except Exception as exc:  # throttled, network: the next tick retries while the lease lasts
                log.debug("could not renew the claim on %s: %s", key, type(exc).__name__)
                continue
            with self._held_lock:
                if key not in self._held:
                    continue
                if kept:
                    self._held[key] = now
                else:
                    log.warning("the claim on event %s ran out and another replica took it", key)
                    self._held.pop(key)
                    lost.append(key)
        return lost
