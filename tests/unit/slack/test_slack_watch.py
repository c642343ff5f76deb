"""Watch mode posts when the cluster's state changes (new critical, resolved, status), not on every run."""

from __future__ import annotations

from datetime import timedelta

import pytest
from slack_sdk import WebClient

from fmdoctor.cli.main import main
from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.approval import Approval
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.remediation.plan import plan_fix
from fmdoctor.slack import watch
from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL, texts
from fmdoctor.slack.watch import Change, Snapshot, Watcher

# End to end, so out of the fast tier (`pytest -m "not e2e"`): `fmdoctor slack watch` end to end: repeated runs
# over the seeded demo, posts to the fake Web API.
pytestmark = pytest.mark.e2e


CHECK = "efa-sg-self-reference"


def test_posts_the_start_then_only_changes(demo, fake_slack, tmp_path):
    world, doctor = demo
    client = WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url)
    watcher = Watcher(doctor, world.cluster, client, CHANNEL, timedelta(minutes=5), only=[CHECK])

    assert watcher.run_once().noteworthy
    [start] = fake_slack.of("chat.postMessage")
    assert start["channel"] == CHANNEL and "watching" in texts(start) and "CRITICAL" in texts(start)

    assert not watcher.run_once().noteworthy
    assert len(fake_slack.of("chat.postMessage")) == 1, "same state: nothing posted"

    audit = AuditLog(tmp_path / "audit.jsonl")
    plan = plan_fix(doctor, world.cluster, CHECK, audit=audit)
    assert apply_fix(doctor, plan, Approval.grant(plan, approver="test", channel="test"), audit=audit).ok

    change = watcher.run_once()
    assert change.resolved == list(plan.findings)
    resolved = fake_slack.of("chat.postMessage")[1]
    assert "CRITICAL → *OK*" in texts(resolved) and "resolved" in texts(resolved)
    assert plan.findings[0] in texts(resolved)

    watcher.run_once()
    assert len(fake_slack.of("chat.postMessage")) == 2


def test_a_new_critical_finding_is_news_even_when_the_status_stays_critical():
    before = Snapshot("critical", frozenset({"a/1"}))
    assert Change(before, Snapshot("critical", frozenset({"a/1", "b/2"}))).new_critical == ["b/2"]
    assert Change(before, Snapshot("critical", frozenset({"b/2"}))).resolved == ["a/1"]
    assert not Change(before, Snapshot("critical", frozenset({"a/1"}))).noteworthy
    assert Change(Snapshot("ok"), Snapshot("warning")).noteworthy  # status changed (a warning appeared)
    assert Change(Snapshot("unknown", problem="x"), Snapshot("unknown", problem="y")).noteworthy


def test_a_cluster_that_cannot_be_checked_is_posted_once_and_the_loop_goes_on(demo, fake_slack):
    world, doctor = demo
    client = WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url)

    def gone(*args, **kwargs):
        raise TargetNotFound("no running or pending instances tagged with cluster 'x'")

    doctor.check = gone
    watcher = Watcher(doctor, "x", client, CHANNEL, timedelta(minutes=5), sleep=lambda s: None)
    watcher.run(count=3)
    [message] = fake_slack.of("chat.postMessage")
    assert "could not check" in texts(message) and "UNKNOWN" in texts(message)


def test_slack_failing_to_take_a_post_keeps_the_change_for_the_next_run(demo, fake_slack):
    world, doctor = demo
    client = WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url)
    watcher = Watcher(doctor, world.cluster, client, CHANNEL, timedelta(minutes=5), only=[CHECK])
    fake_slack.failures["chat.postMessage"] = "channel_not_found"
    watcher.run_once()
    del fake_slack.failures["chat.postMessage"]
    assert watcher.run_once().noteworthy
    assert len(fake_slack.replies("chat.postMessage")) == 2 and fake_slack.replies("chat.postMessage")[1]["ok"]


def test_cli_watch_posts_once_for_an_unchanged_cluster(fake_slack, monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_API_URL", fake_slack.api_url)
    slept = []
    monkeypatch.setattr(watch, "_sleep", slept.append)
    code = main(["slack", "watch", "--demo", "--channel", CHANNEL, "--every", "5m", "--count", "2",
                 "--only", CHECK])
    assert code == 0
    assert len(fake_slack.of("chat.postMessage")) == 1
    assert len(slept) == 1 and 250 < slept[0] <= 300


@pytest.mark.parametrize("every", ["10s", "soon"])
def test_cli_watch_refuses_a_bad_interval(every, capsys, monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    assert main(["slack", "watch", "--demo", "--channel", CHANNEL, "--every", every]) == 3
    assert "--every" in capsys.readouterr().err
