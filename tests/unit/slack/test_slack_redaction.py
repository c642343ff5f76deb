"""What fmdoctor sends to Slack passes the one redaction policy; ids it reads back (button values) do not."""

from __future__ import annotations

import json

from slack_sdk import WebClient

from fmdoctor.config import SlackSettings
from fmdoctor.slack.outbound import redacted_reply, redacting
from fmdoctor.slack.service import SlackService, Where
from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
WEBHOOK = "https://hooks.slack.com/" + "services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
ACCOUNT = "123456789012"


def test_every_post_of_the_service_is_redacted_and_button_values_are_kept(fake_slack, tmp_path):
    from fmdoctor.remediation.audit import AuditLog

    client = WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url)  # as a front end builds it: unwrapped
    service = SlackService(object(), SlackSettings(), client, AuditLog(tmp_path / "a.jsonl"))  # type: ignore[arg-type]
    value = json.dumps({"finding": f"x/arn:aws:iam::{ACCOUNT}:role/r"})
    service.post(Where(CHANNEL), [{"text": f"key {SECRET}", "blocks": [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"posted to {WEBHOOK} by {ACCOUNT}"}},
        {"type": "actions", "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Runbook"},
                                          "action_id": "a", "value": value}]}]}])
    [sent] = fake_slack.of("chat.postMessage")
    shown = json.dumps(sent)
    assert SECRET not in shown and WEBHOOK not in shown and "[REDACTED:aws-secret]" in shown
    blocks = sent["blocks"] if isinstance(sent["blocks"], list) else json.loads(sent["blocks"])
    assert ACCOUNT not in blocks[0]["text"]["text"]
    assert blocks[1]["elements"][0]["value"] == value  # fmdoctor reads it back: untouched


def test_replies_through_ack_and_respond_are_redacted():
    sent: list[dict] = []
    reply = redacted_reply(lambda *args, **kwargs: sent.append({"args": args, **kwargs}))
    reply(f"first {SECRET}", blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": SECRET}}])
    reply(text=f"token xoxb-{'1' * 12}-abcdefghijkl")
    assert SECRET not in json.dumps(sent) and "xoxb-" not in json.dumps(sent)


def test_wrapping_twice_redacts_once():
    calls: list[dict] = []

    class Client:
        def api_call(self, method, **kwargs):
            calls.append(kwargs)

    client = redacting(redacting(Client()))
    client.api_call("chat.postMessage", json={"text": SECRET})
    assert calls == [{"json": {"text": "[REDACTED:aws-secret]"}}]
