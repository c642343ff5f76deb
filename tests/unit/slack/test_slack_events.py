"""Mentions: commands and questions answered in the thread, the thread as the conversation; retries once."""

from __future__ import annotations

import json
import time

import pytest

from fmdoctor.assistant import Assistant
from fmdoctor.slack.testing import CHANNEL, buttons, texts

# End to end, so out of the fast tier (`pytest -m "not e2e"`): the Slack app end to end: Events API deliveries
# over signed HTTP, over the seeded demo.
pytestmark = pytest.mark.e2e


BOT = "<@UBOT00001>"


class SpyAssistant:
    """The real offline assistant, recording which session each question went to."""

    def __init__(self, doctor, cluster):
        self.real = Assistant(doctor, cluster)
        self.asked: list[tuple[str, str]] = []

    def ask(self, question, session_id):
        self.asked.append((question, session_id))
        return self.real.ask(question, session_id=session_id)


def mention(text, ts, thread_ts=None):
    event = {"type": "app_mention", "user": "UASKER0001", "text": text, "ts": ts, "channel": CHANNEL,
             "event_ts": ts}
    return {**event, "thread_ts": thread_ts} if thread_ts else event


def test_questions_are_answered_in_the_thread_which_is_the_conversation(demo, make_app, fake_slack):
    world, doctor = demo
    spies = []
    app = make_app(doctor, world.cluster, assistant_factory=lambda d, c: spies.append(SpyAssistant(d, c)) or spies[-1])
    root = "1700000100.000001"
    reply = app.event(mention(f"{BOT} is my cluster healthy?", root), "Ev0001")
    assert reply.status == 200 and reply.seconds < 3
    [first] = fake_slack.wait_for("chat.postMessage")
    assert first["channel"] == CHANNEL and first["thread_ts"] == root
    assert "efa-sg-self-reference/" in texts(first), "the answer cites findings"

    app.event(mention(f"{BOT} why can't I ssh to the head node?", "1700000100.000009", thread_ts=root), "Ev0002")
    second = fake_slack.wait_for("chat.postMessage", 2)[1]
    assert second["thread_ts"] == root
    [spy] = spies
    assert [q for q, _ in spy.asked] == ["is my cluster healthy?", "why can't I ssh to the head node?"]
    assert {s for _, s in spy.asked} == {f"slack:{CHANNEL}:{root}"}, "one thread, one conversation"
    assert "ssh-unreachable" in texts(second)


def test_a_command_in_a_mention_posts_the_report_in_that_thread(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    app.event(mention(f"{BOT} check --only efa-sg-self-reference", "1700000200.000002",
                      thread_ts="1700000200.000001"), "Ev0003")
    [message] = fake_slack.wait_for("chat.postMessage")
    assert message["thread_ts"] == "1700000200.000001"
    assert {json.loads(b["value"])["check"] for b in buttons([message], "fmdoctor_fix")} == {"efa-sg-self-reference"}


def test_a_redelivered_event_is_handled_once(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    ran = []
    real_check = doctor.check
    doctor.check = lambda *a, **k: ran.append(a) or real_check(*a, **k)
    event = mention(f"{BOT} check --only efa-sg-self-reference", "1700000300.000001")
    assert app.event(event, "Ev0004").status == 200
    retry = app.event(event, "Ev0004", {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})
    again = app.event(event, "Ev0004", {"X-Slack-Retry-Num": "2", "X-Slack-Retry-Reason": "http_timeout"})
    assert retry.status == 200 and again.status == 200  # acknowledged, so Slack stops retrying
    fake_slack.wait_for("chat.postMessage")
    time.sleep(1.0)
    assert len(fake_slack.of("chat.postMessage")) == 1 and len(ran) == 1

    app.event(event, "Ev0005")  # another event (another id) is new work
    fake_slack.wait_for("chat.postMessage", 2)


def test_a_forged_event_is_rejected_and_does_not_poison_the_dedupe(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    body = json.dumps({"type": "event_callback", "event_id": "Ev0006",
                       "event": mention(f"{BOT} help", "1700000400.000001")})
    assert app.post(body, "application/json", {"X-Slack-Request-Timestamp": str(int(time.time())),
                                               "X-Slack-Signature": "v0=" + "0" * 64}, signed=False).status == 401
    app.event(mention(f"{BOT} help", "1700000400.000001"), "Ev0006")
    [message] = fake_slack.wait_for("chat.postMessage")
    assert "/fmdoctor check CLUSTER" in texts(message)
