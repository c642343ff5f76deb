"""The Slack modules on their own: command parsing, Block Kit limits, config, tokens, approvers, dedupe."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from slack_sdk import WebClient

from fmdoctor.config import SlackSettings, parse_settings
from fmdoctor.engine.errors import ConfigError, UsageError
from fmdoctor.engine.model import Finding, Report, RunStats, Severity, Status
from fmdoctor.slack import blocks
from fmdoctor.slack.auth import Approvers, NotAllowed, pick_cluster
from fmdoctor.slack.commands import is_command, parse_command
from fmdoctor.slack.dedupe import SeenEvents
from fmdoctor.slack.testing import APPROVER, BOT_TOKEN, GROUP, GROUP_MEMBER, STRANGER, buttons
from fmdoctor.slack.tokens import RedactSecrets, SlackTokens


@pytest.mark.parametrize(("text", "expected"), [
    ("check llm-train", {"verb": "check", "cluster": "llm-train", "only": ()}),
    ("check llm-train --only efa,gpu-idle", {"cluster": "llm-train", "only": ("efa", "gpu-idle")}),
    ("check --only=efa", {"cluster": None, "only": ("efa",)}),
    ("why-not llm-train --from 203.0.113.0/24 --to head --port 22",
     {"verb": "why-not", "source": "203.0.113.0/24", "destination": "head", "port": "22", "protocol": "tcp"}),
    ("why-not --from “a b” --to s3 --protocol UDP --port 53", {"source": "a b", "protocol": "udp"}),
    ("", {"verb": "help"}),
    ("help", {"verb": "help"}),
])
def test_commands_parse(text, expected):
    command = parse_command(text)
    assert {k: getattr(command, k) for k in expected} == expected


@pytest.mark.parametrize(("text", "message"), [
    ("reboot llm-train", "unknown command 'reboot'"),
    ("check a b", "one cluster per command"),
    ("check a --force", "unknown option '--force'"),
    ("check a --only", "--only needs a value"),
    ("why-not a --to head", "why-not needs --from"),
    ("why-not a --from x --to y --protocol sctp", "unknown protocol 'sctp'"),
    ('check "unclosed', "cannot read the command"),
])
def test_bad_commands_say_what_is_wrong_with_the_usage(text, message):
    with pytest.raises(UsageError) as raised:
        parse_command(text)
    assert message in raised.value.message and "/fmdoctor check CLUSTER" in raised.value.hint


def test_mentions_tell_commands_from_questions():
    assert is_command("check llm-train") and is_command("Why-not x --from a --to b")
    assert not is_command("why is training slow?") and not is_command("")


def finding(n: int, severity: Severity = Severity.WARNING, **evidence) -> Finding:
    check = "gpu-idle" if severity != Severity.CRITICAL else "efa-sg-self-reference"
    return Finding(check=check, severity=severity, resource=f"i-{n:017x}", summary=f"node {n} <is> idle & costly",
                   evidence=evidence, runbook="gpu-idle")


def report(findings: list[Finding]) -> Report:
    return Report(cluster="c1", region="us-west-2", generated_at=datetime(2026, 1, 1, tzinfo=UTC),
                  status=Status.CRITICAL if any(f.severity == Severity.CRITICAL for f in findings) else Status.WARNING,
                  findings=findings, stats=RunStats(checks_run=["gpu-idle"], duration_s=1.5))


def test_a_long_report_is_split_into_messages_under_the_limit_and_loses_no_finding():
    findings = [finding(n) for n in range(60)] + [finding(99, Severity.CRITICAL, fix=[{"action": "x"}])]
    messages = blocks.report_messages(report(findings), max_blocks=40)
    assert len(messages) >= 3
    assert all(len(m["blocks"]) <= 40 for m in messages)
    shown = [b["value"] for b in buttons(messages, blocks.RUNBOOK_ACTION)]
    assert len(shown) == 61 and all(f.id in "".join(shown) for f in findings)
    assert "part 2/" in messages[1]["text"] and blocks.context(f"part 1/{len(messages)}: continued below") \
        in messages[0]["blocks"]
    for message in messages:  # a finding's section and its buttons never land in different messages
        kinds = [b["block_id"].split("-")[0] for b in message["blocks"] if "block_id" in b]
        assert kinds.count("finding") == kinds.count("actions")


def test_text_from_aws_is_escaped_and_unknown_fix_actions_get_no_button():
    [message] = blocks.report_messages(report([finding(1, Severity.CRITICAL, fix=[{"action": "not-an-action"}])]))
    text = str(message["blocks"])
    assert "&lt;is&gt; idle &amp; costly" in text and "<is>" not in text
    assert buttons([message], blocks.FIX_ACTION) == []


def test_long_text_is_split_into_sections_and_fences_stay_balanced():
    body = "intro\n```\n" + "\n".join(f"aws ec2 describe-thing --id {n}" for n in range(400)) + "\n```\nend"
    messages = blocks.text_messages("*title*", body, code=False)
    sections = [b["text"]["text"] for m in messages for b in m["blocks"] if b["type"] == "section"][1:]
    assert all(len(s) <= 3000 for s in sections) and len(sections) > 3
    assert all(s.count("```") % 2 == 0 for s in sections)
    lines = "\n".join(sections).splitlines()
    assert all(f"aws ec2 describe-thing --id {n}" in lines for n in range(400)) and lines[-1] == "end"


def test_chunks_keep_every_character():
    text = "a" * 7000 + "\n" + "b\n" * 3000
    assert "".join(blocks.chunks(text, 2900)).replace("\n", "") == text.replace("\n", "")


def test_slack_config_reports_unknown_keys_and_bad_ids_with_their_line():
    with pytest.raises(ConfigError) as raised:
        parse_settings("region: us-west-2\nslack:\n  approvers: [U0123ABCD]\n  aprovers: []\n")
    assert "fmdoctor.yaml:4: unknown key 'slack.aprovers'" in raised.value.message
    with pytest.raises(ConfigError) as raised:
        parse_settings("slack:\n  approvers: [alice]\n")
    assert "fmdoctor.yaml:2" in raised.value.message and "'alice' is not a Slack user id" in raised.value.message
    with pytest.raises(ConfigError) as raised:
        parse_settings("slack:\n  channel_clusters:\n    general: [a]\n")
    assert "'general' is not a Slack channel id" in raised.value.message


def test_each_channel_checks_only_its_clusters_and_star_is_the_default():
    settings = SlackSettings(channel_clusters={"CTRAIN0001": ["llm-train"], "COPS00001": ["*"], "*": ["sandbox"]})
    assert pick_cluster(settings, "CTRAIN0001", None) == "llm-train"
    assert pick_cluster(settings, "COPS00001", "anything") == "anything"
    assert pick_cluster(settings, "CRANDOM001", None) == "sandbox"
    with pytest.raises(NotAllowed, match="may not check cluster 'llm-train'"):
        pick_cluster(settings, "CRANDOM001", "llm-train")
    with pytest.raises(NotAllowed, match="name the cluster"):
        pick_cluster(settings, "COPS00001", None)
    with pytest.raises(NotAllowed, match="may not check any cluster"):
        pick_cluster(SlackSettings(), "CTRAIN0001", "llm-train")


def test_tokens_come_from_the_environment_and_each_mode_names_what_it_lacks(monkeypatch):
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN is not set"):
        SlackTokens.from_env("http")
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    with pytest.raises(ConfigError, match="--mode http needs SLACK_SIGNING_SECRET"):
        SlackTokens.from_env("http")
    with pytest.raises(ConfigError, match="--mode socket needs SLACK_APP_TOKEN"):
        SlackTokens.from_env("socket")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9/api")
    tokens = SlackTokens.from_env(None)
    assert tokens.api_url == "http://127.0.0.1:9/api/" and BOT_TOKEN not in repr(tokens)


def test_secrets_are_redacted_from_log_records(caplog):
    logger = logging.getLogger("fmdoctor.slack.test-redaction")
    logger.addFilter(RedactSecrets(["s3cr3t-signing"]))
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("token %s, other xapp-1-A0-123-abc, secret %s", BOT_TOKEN, "s3cr3t-signing")
    assert "[redacted]" in caplog.text
    assert BOT_TOKEN not in caplog.text and "xapp-1" not in caplog.text and "s3cr3t" not in caplog.text


def test_approvers_are_users_or_members_of_groups_cached_and_a_failed_lookup_refuses(fake_slack):
    client = WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url)
    now = [0.0]
    approvers = Approvers(SlackSettings(approvers=[APPROVER, GROUP, "SMISSING01"]), client, clock=lambda: now[0])
    assert approvers.allows(APPROVER) and approvers.allows(GROUP_MEMBER)
    assert not approvers.allows(STRANGER) and not approvers.allows(None) and not approvers.allows(GROUP)
    calls = len(fake_slack.of("usergroups.users.list"))
    assert approvers.allows(GROUP_MEMBER) and len(fake_slack.of("usergroups.users.list")) == calls  # cached
    fake_slack.group_members[GROUP] = []  # removed from the group: refused once the cache expires
    now[0] += 301
    assert not approvers.allows(GROUP_MEMBER)
    assert not Approvers(SlackSettings(approvers=[GROUP]), WebClient(token="x", base_url="http://127.0.0.1:9/")) \
        .allows(GROUP_MEMBER), "Slack unreachable: refuse"


def test_seen_events_forget_after_their_ttl():
    now = [0.0]
    seen = SeenEvents(ttl_s=60, max_size=2, clock=lambda: now[0])
    assert seen.first_time("E1") and not seen.first_time("E1")
    now[0] = 61
    assert seen.first_time("E1")
    assert seen.first_time("E2") and not seen.first_time("E2")
    assert seen.first_time("E3") and not seen.first_time("E3")
    assert seen.first_time("E1"), "bounded: the oldest id is dropped first"


def test_a_long_title_is_split_too():
    messages = blocks.report_messages(report([finding(1)]), title="new critical: " + ", ".join(["`x/y`"] * 1500))
    sections = [b["text"]["text"] for m in messages for b in m["blocks"] if b["type"] == "section"]
    assert all(len(s) <= 3000 for s in sections) and sum(s.count("`x/y`") for s in sections) == 1500
