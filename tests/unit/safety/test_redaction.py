"""One redaction policy, tested against the formats secrets really have.

The corpus is written from each issuer's documentation of its format (values built here, none real):
AWS's example credentials and key-id prefixes (IAM user guide, "Unique identifiers" and "Managing access
keys"; STS AssumeRole's JSON answer), Slack's token types (api.slack.com/authentication/token-types:
xoxb-, xoxp-, xoxe.xoxp- refresh, xapp- app-level) and incoming-webhook URLs
(api.slack.com/messaging/webhooks), GitHub's token prefixes (docs.github.com "About authentication to
GitHub": ghp_, gho_, ghu_, ghs_, ghr_, github_pat_), OpenAI's project and service-account keys, Anthropic's
sk-ant-api03- keys, PEM private keys (RFC 7468, OpenSSH's own armour), the JWT of RFC 7519 section 3.1, and
bare 12-digit account ids as EC2 writes OwnerId.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.safety.redact import Redactor, redact_data, redactor_for

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SLACK = "xox" + "b-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
USER_TOKEN = "xox" + "p-17653672481-19874698323-19874698324-0123456789abcdef0123456789abcdef"
REFRESH = "xox" + "e.xoxp-1-Mi0yLTE3NjUzNjcyNDgxLTE5ODc0Njk4MzIzLWFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6"
APP = "xap" + "p-1-A0123456789-1234567890123-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
WEBHOOK = "https://hooks.slack.com/" + "services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
GITHUB = ["gh" + p + "_" + "16C7e42F292c6912E7710c838347Ae178B4a" for p in "pousr"]
GITHUB_PAT = "github_" + "pat_11ABCDEFG0" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab"
OPENAI = "sk-" + "proj-" + "Q7f3Lr9aB2xK_Zp8Wm-4Tn6Yd1Hc5Vj0" * 4
OPENAI_SVC = "sk-" + "svcacct-" + "Q7f3Lr9aB2xK_Zp8Wm-4Tn6Yd1Hc5Vj0" * 3
ANTHROPIC = "sk-" + "ant-api03-" + "Q7f3Lr9aB2xK_Zp8Wm-4Tn6Yd1Hc5Vj0" * 3 + "-AbCdEAA"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
       "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----")
OPENSSH = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
           "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
           "QyNTUxOQAAACDh4mJ0Kd3Fc2bY5h3t9W1Z0pG0bQ4g6m8T5n7k2L1s5wAAAJg=\n-----END OPENSSH PRIVATE KEY-----")
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIy"
       "fQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
SESSION = "IQoJb3JpZ2luX2VjEHoaCXVzLWVhc3QtMSJHMEUCIQDtqstfDEaRfZKFK5Z2n2CnP3Ow0v6L2m" + "Zm9vYmFy" * 8
ACCOUNT = "123456789012"

CORPUS = [
    ("aws-access-key-id", KEY_ID, f"aws_access_key_id = {KEY_ID}"),
    ("aws-access-key-id", "ASIAIOSFODNN7EXAMPLE", "temporary ASIAIOSFODNN7EXAMPLE in a log line"),
    ("aws-secret", SECRET, f"aws_secret_access_key={SECRET}"),
    ("aws-secret", SECRET, f"the key is {SECRET} (no name before it)"),
    ("aws-secret", SECRET, json.dumps(json.dumps({"SecretAccessKey": SECRET}))),  # quoted JSON inside JSON: \"
    ("aws-secret", SECRET, json.dumps({"Credentials": {"AccessKeyId": "ASIAIOSFODNN7EXAMPLE",
                                                        "SecretAccessKey": SECRET}})),
    ("aws-session-token", SESSION, f'"SessionToken": "{SESSION}"'),
    ("aws-session-token", SESSION, f"bare {SESSION}"),
    ("slack-token", SLACK, f"SLACK_BOT_TOKEN={SLACK}"),
    ("slack-token", USER_TOKEN, f"user token {USER_TOKEN}"),
    ("slack-token", REFRESH, f"refresh {REFRESH}"),
    ("slack-token", APP, f"SLACK_APP_TOKEN={APP}"),
    ("slack-webhook", WEBHOOK, f"post to {WEBHOOK} when it fails"),
    *[("github-token", token, f"GH_TOKEN={token}") for token in GITHUB],
    ("github-token", GITHUB_PAT, f"token {GITHUB_PAT}"),
    ("api-key", OPENAI, f"OPENAI_API_KEY={OPENAI}"),
    ("api-key", OPENAI_SVC, f"key: {OPENAI_SVC}"),
    ("api-key", ANTHROPIC, f"x-api-key: {ANTHROPIC}"),
    ("private-key", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun", PEM),
    ("private-key", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ", OPENSSH),
    ("private-key", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ", OPENSSH[:150] + " [cut off]"),
    ("private-key", "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun", json.dumps({"key": PEM})),
    ("jwt", JWT, f"cookie session={JWT}; path=/"),
    ("account-id", ACCOUNT, f'{{"OwnerId": "{ACCOUNT}", "ReservationId": "r-0123"}}'),
    ("account-id", ACCOUNT, f"owned by {ACCOUNT} in us-west-2"),
    ("account-id", ACCOUNT, f"arn:aws:iam::{ACCOUNT}:role/train"),
    ("account-id", ACCOUNT, f"https://sqs.us-west-2.amazonaws.com/{ACCOUNT}/spot-events"),
    ("account-id", ACCOUNT, f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/llm:latest"),
    ("account-id", ACCOUNT, f"s3://sagemaker-us-west-2-{ACCOUNT}/checkpoints/"),
]


@pytest.mark.parametrize(("kind", "secret", "text"), CORPUS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(CORPUS)])
def test_every_secret_format_is_redacted(kind, secret, text):
    redacted = Redactor()(text)
    assert secret not in redacted
    assert f"[REDACTED:{kind}]" in redacted


@pytest.mark.parametrize("text", [
    "efa-sg-self-reference/sg-0123456789abcdef0 on i-0abc1234def567890 in subnet-0fedcba9876543210",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",  # a lowercase hex digest is not a secret key
    "plan digest " + "9f2c" * 16,
    "at 2024-05-01T12:00:00Z (epoch 1714564800, 1714564800000 ms)",
    "s3://ckpt/llm/step-000000001200/__0_0.distcp",  # a zero-padded step is part of a name
    '"bytes": 123456789012, "files": 4',  # a size, not an account
    "arn:aws:ec2:us-west-2::image/ami-0123456789abcdef0",
])
def test_what_answers_cite_is_kept(text):
    assert Redactor()(text) == text


def test_data_is_redacted_in_its_strings_and_keeps_its_shape():
    report = {"findings": [{"resource": "sg-1", "evidence": {"owner": f"arn:aws:iam::{ACCOUNT}:root", "n": 3,
                                                             "tags": [f"key={SECRET}"]}}], "ok": True}
    clean = redact_data(report)
    assert clean["findings"][0]["evidence"]["n"] == 3 and clean["ok"] is True
    assert ACCOUNT not in json.dumps(clean) and SECRET not in json.dumps(clean)


def test_only_the_named_keys_are_redacted_when_asked():
    """Slack: the ``text`` people read is redacted; a button's ``value`` (a finding id) must keep working."""
    message = {"text": f"owner {ACCOUNT}", "blocks": [{"type": "section", "text": {"type": "mrkdwn",
               "text": f"token {SLACK}"}}, {"type": "button", "value": f'{{"finding": "x/arn:aws:iam::{ACCOUNT}:r"}}'}]}
    clean = redact_data(message, keys=frozenset({"text"}))
    assert ACCOUNT not in clean["text"] and SLACK not in json.dumps(clean)
    assert clean["blocks"][1]["value"] == message["blocks"][1]["value"]


def _ways_out(settings: Settings | None = None) -> dict[str, Callable[[str], str]]:
    """Each way text leaves the process towards a model or a chat, as its front end applies the policy."""
    from langchain_core.messages import ToolMessage

    from fmdoctor.assistant.guard import redact_message
    from fmdoctor.mcp.server import clean
    from fmdoctor.mcp.service import McpService
    from fmdoctor.slack.outbound import redacted_reply, redacting

    settings = settings or Settings()
    mcp = McpService(Doctor(settings=settings, connection=Connection(region="us-west-2")))
    posted: list[dict[str, Any]] = []

    class Client:
        def api_call(self, method: str, **kwargs: Any) -> None:
            posted.append(kwargs["json"])

    def slack_post(text: str) -> str:
        redacting(Client(), redactor_for(settings)).api_call("chat.postMessage", json={"text": text})
        return posted[-1]["text"]

    def slack_ack(text: str) -> str:
        sent: list[str] = []
        redacted_reply(sent.append, redactor_for(settings))(text)
        return sent[0]

    return {
        "assistant": lambda text: redact_message(ToolMessage(text, tool_call_id="1"),
                                                 Redactor(settings.agent.redact)).content,
        "mcp": lambda text: clean({"findings": [{"evidence": {"tag": text}}]}, mcp.redactor)[
            "findings"][0]["evidence"]["tag"],
        "slack-post": slack_post,
        "slack-ack": slack_ack,
    }


@pytest.mark.parametrize("way", ["assistant", "mcp", "slack-post", "slack-ack"])
@pytest.mark.parametrize(("kind", "secret", "text"), CORPUS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(CORPUS)])
def test_every_way_out_applies_the_one_policy(way, kind, secret, text):
    sent = _ways_out()[way](text)
    assert secret not in sent and f"[REDACTED:{kind}]" in sent


@pytest.mark.parametrize("way", ["assistant", "mcp", "slack-post", "slack-ack"])
def test_configured_patterns_apply_on_every_way_out(way):
    settings = Settings(agent={"redact": [r"\bllm-prod-\w+\b"]})
    sent = _ways_out(settings)[way]("endpoint llm-prod-chat7 is slow")
    assert "llm-prod-chat7" not in sent and "[REDACTED:configured]" in sent
