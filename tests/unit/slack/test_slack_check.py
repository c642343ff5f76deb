"""``/fmdoctor check`` over signed HTTP: the 3-second ack, the report as Block Kit, signatures, the allow-list."""

from __future__ import annotations

import json
import threading
import time

import pytest

from fmdoctor.engine.model import Severity
from fmdoctor.slack.testing import CHANNEL, buttons, sign, texts

# End to end, so out of the fast tier (`pytest -m "not e2e"`): the Slack app end to end: signed HTTP requests
# in, Block Kit posts to the fake Web API, over the seeded demo.
pytestmark = pytest.mark.e2e



def test_slash_check_acks_at_once_then_posts_every_finding_with_buttons(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    release, real_check = threading.Event(), doctor.check
    reports = []

    def slow_check(*args, **kwargs):  # the checks take as long as they take; the ack must not wait for them
        assert release.wait(20)
        reports.append(real_check(*args, **kwargs))
        return reports[-1]

    doctor.check = slow_check
    reply = app.command(f"check {world.cluster}")
    assert reply.status == 200 and reply.seconds < 3
    assert "running" in reply.body and world.cluster in reply.body
    assert fake_slack.of("chat.postMessage") == []  # acknowledged before the checks ran
    release.set()

    first = fake_slack.wait_for("chat.postMessage")[0]
    report = reports[0]
    messages = fake_slack.wait_for("chat.postMessage", 2)  # the demo's report needs two messages
    time.sleep(0.3)
    messages = fake_slack.of("chat.postMessage")
    assert all(m["channel"] == CHANNEL for m in messages)
    assert first.get("thread_ts") is None  # into the channel the command came from
    first_ts = fake_slack.replies("chat.postMessage")[0]["ts"]
    assert all(m["thread_ts"] == first_ts for m in messages[1:]), "later parts go in its thread"
    assert all(len(m["blocks"]) <= 50 for m in messages)
    assert "CRITICAL" in texts(first) and world.cluster in texts(first)

    runbooks = buttons(messages, "fmdoctor_runbook")
    shown = {json.loads(b["value"])["finding"] for b in runbooks}
    assert shown == {f.id for f in report.findings}, "every finding is posted: split, never cut off"
    fixes = {(v := json.loads(b["value"]))["check"] + "/" + v["resource"] for b in buttons(messages, "fmdoctor_fix")}
    assert any(f.startswith("efa-sg-self-reference/") for f in fixes)
    assert not any(f.startswith("gpu-idle/") for f in fixes), "no Fix button without an automated fix"
    everything = "\n".join(texts(m) for m in messages)
    efa = next(f for f in report.findings if f.check == "efa-sg-self-reference")
    assert efa.resource in everything and efa.summary.split()[0] in everything
    order = [everything.index(f"*{s.value.capitalize()}*") for s in Severity
             if any(f.severity == s for f in report.findings)]
    assert order == sorted(order), "grouped by severity, critical first"


def test_only_narrows_the_checks(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    assert app.command(f"check {world.cluster} --only efa-sg-self-reference").status == 200
    [message] = fake_slack.wait_for("chat.postMessage")
    ids = {json.loads(b["value"])["finding"].split("/")[0] for b in buttons([message], "fmdoctor_runbook")}
    assert ids == {"efa-sg-self-reference"}


def test_bad_or_old_signatures_are_rejected_before_anything_runs(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    ran = []
    doctor.check = lambda *a, **k: ran.append(a)
    body = f"command=%2Ffmdoctor&text=check+{world.cluster}&channel_id={CHANNEL}&user_id=U1&team_id=T0FAKE"
    form = "application/x-www-form-urlencoded"
    forged = app.post(body, form, sign(body, secret="not-the-signing-secret"), signed=False)
    stale = app.post(body, form, sign(body, timestamp=int(time.time()) - 6 * 60), signed=False)
    unsigned = app.post(body, form, signed=False)
    tampered = app.post(body.replace("check", "check+--only+x"), form, sign(body), signed=False)
    assert [r.status for r in (forged, stale, unsigned, tampered)] == [401, 401, 401, 401]
    time.sleep(0.3)
    assert ran == [] and fake_slack.of("chat.postMessage") == []


def test_a_channel_checks_only_its_allowed_clusters(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    ran = []
    doctor.check = lambda *a, **k: ran.append(a)
    other = app.command("check prod-secret-cluster")
    elsewhere = app.command(f"check {world.cluster}", channel="COTHER0001")
    assert "may not check cluster 'prod-secret-cluster'" in other.body
    assert "may not check any cluster" in elsewhere.body
    time.sleep(0.3)
    assert ran == [] and fake_slack.of("chat.postMessage") == []


def test_the_channels_only_cluster_is_the_default_and_usage_errors_are_answered(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    assert "unknown command 'chekc'" in app.command("chekc").body
    assert "why-not needs --to" in app.command("why-not --from head").body
    assert app.command("check --only efa-sg-self-reference").status == 200  # no cluster: the channel's one
    [message] = fake_slack.wait_for("chat.postMessage")
    assert world.cluster in texts(message)


def test_not_in_the_channel_answers_through_the_response_url(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    fake_slack.failures["chat.postMessage"] = "not_in_channel"
    app.command(f"check {world.cluster} --only efa-sg-self-reference")
    [answer] = fake_slack.wait_for("response_url")
    assert answer["response_type"] == "in_channel" and "efa-sg-self-reference" in json.dumps(answer["blocks"])


def test_why_not_posts_the_verdict_and_the_blocking_rule(demo, make_app, fake_slack):
    world, doctor = demo
    app = make_app(doctor, world.cluster)
    reply = app.command(f"why-not {world.cluster} --from 203.0.113.0/24 --to head --port 22")
    assert reply.status == 200 and reply.seconds < 3
    [message] = fake_slack.wait_for("chat.postMessage")
    text = texts(message)
    assert "BLOCKED" in text and "sg-ingress-no-match" in text and "Path" in text
