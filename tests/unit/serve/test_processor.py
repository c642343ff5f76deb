"""One event through routing, a scoped Doctor run and the Slack output, against the demo world in moto."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fmdoctor.serve.processor import DeliveryFailed
from fmdoctor.slack.testing import buttons, texts

from .test_events import load


def spot_warning(instance: str, event_id: str = "spot-1") -> str:
    data = json.loads(load("spot-interruption.json"))
    data["id"] = event_id
    data["detail"]["instance-id"] = instance
    data["resources"] = [f"arn:aws:ec2:us-west-2a:instance/{instance}"]
    return json.dumps(data)


def test_spot_warning_is_investigated_and_posted_once(served, fake_slack, caplog):
    interrupted = served.world.facts["spot"]["interrupted"]
    caplog.set_level(logging.INFO, "fmdoctor.serve")
    assert served.processor.handle_body(spot_warning(interrupted), "sqs:m-1") == ["delivered"]
    [post, *rest] = fake_slack.of("chat.postMessage")
    summary = texts(post)
    assert "Spot interruption warning" in summary and served.world.cluster in summary
    assert "Most likely cause" in summary and interrupted in summary
    assert buttons([post], "fmdoctor_runbook")  # the cause's Runbook button, as in every front end
    assert all(p["thread_ts"] == fake_slack.replies("chat.postMessage")[0]["ts"] for p in rest)  # report in thread
    # Redelivered (SQS at-least-once): acknowledged, not posted again.
    posts = len(fake_slack.of("chat.postMessage"))
    assert served.processor.handle_body(spot_warning(interrupted), "sqs:m-1-again") == ["duplicate"]
    assert len(fake_slack.of("chat.postMessage")) == posts
    assert any("sqs:m-1 spot-1" in r.getMessage() and "delivered" in r.getMessage() for r in caplog.records)


def test_the_same_alarm_again_updates_its_thread(served, fake_slack):
    interrupted = served.world.facts["spot"]["interrupted"]
    served.processor.handle_body(spot_warning(interrupted, "first"), "sqs:a")
    first_ts = fake_slack.replies("chat.postMessage")[0]["ts"]
    served.processor.handle_body(spot_warning(interrupted, "second"), "sqs:b")
    [update] = fake_slack.of("chat.update")
    assert update["ts"] == first_ts
    later = fake_slack.of("chat.postMessage")
    assert sum(1 for p in later if not p.get("thread_ts")) == 1  # one message in the channel, the rest threaded
    assert served.investigator.runs == 1  # the second event reused the first one's run (serve.reuse_report)


def test_resolved_alarm_tells_its_thread_and_runs_nothing(served, fake_slack):
    alert = json.loads(load("alertmanager-webhook.json"))
    for labels in (alert["commonLabels"], alert["alerts"][0]["labels"]):
        labels.update(cluster=served.world.cluster, fmdoctor_checks="spot-interruption")  # quick: one check
    assert served.processor.handle_body(json.dumps(alert), "webhook") == ["delivered"]
    alert["status"] = alert["alerts"][0]["status"] = "resolved"
    runs = served.investigator.runs
    assert served.processor.handle_body(json.dumps(alert), "webhook") == ["resolved"]
    assert served.investigator.runs == runs
    assert "resolved" in fake_slack.of("chat.postMessage")[-1]["text"]


@pytest.mark.parametrize(("body", "outcome"), [
    ("{oops", "malformed"),
    (json.dumps({"detail-type": "EC2 Instance State-change Notification", "id": "x", "detail": {}}), "unknown_event"),
    ("x" * (300 * 1024), "too_large"),
])
def test_bad_events_are_acknowledged_with_a_log_line(served, fake_slack, caplog, body, outcome):
    caplog.set_level(logging.INFO, "fmdoctor.serve")
    assert served.processor.handle_body(body, "sqs:bad") == [outcome]
    assert fake_slack.of("chat.postMessage") == []
    assert any("sqs:bad" in r.getMessage() and outcome in r.getMessage() for r in caplog.records)


def test_unknown_cluster_is_acknowledged_and_counted(served, fake_slack):
    assert served.processor.handle_body(spot_warning("i-0000000000000dead"), "sqs:x") == ["unknown_cluster"]
    assert served.metrics.events["unknown_cluster"] == 1 and fake_slack.of("chat.postMessage") == []


def test_failed_delivery_keeps_the_message_and_retries_only_what_failed(served, fake_slack):
    interrupted = served.world.facts["spot"]["interrupted"]
    sent = []

    class FlakyWebhook:
        name = "webhook"
        fail = True

        def send(self, result):
            if self.fail:
                raise OSError("connection refused")
            sent.append(result.event.id)

    flaky = FlakyWebhook()
    served.processor.outputs.append(flaky)
    with pytest.raises(DeliveryFailed, match="webhook"):
        served.processor.handle_body(spot_warning(interrupted), "sqs:m")
    slack_posts = len(fake_slack.of("chat.postMessage"))
    flaky.fail = False
    assert served.processor.handle_body(spot_warning(interrupted), "sqs:m") == ["delivered"]
    assert sent == ["spot-1"] and len(fake_slack.of("chat.postMessage")) == slack_posts  # Slack had it already


def test_secrets_in_event_text_are_redacted_before_posting(served, fake_slack):
    alert = json.loads(load("alertmanager-webhook.json"))
    labels = alert["alerts"][0]["labels"]
    labels["cluster"] = alert["commonLabels"]["cluster"] = served.world.cluster
    labels["fmdoctor_checks"] = "spot-interruption"
    alert["alerts"][0]["annotations"]["description"] = "node env: AWS key AKIAIOSFODNN7EXAMPLE token=hunter2hunter2"
    served.processor.handle_body(json.dumps(alert), "webhook")
    posted = json.dumps(fake_slack.of("chat.postMessage"))
    assert "AKIAIOSFODNN7EXAMPLE" not in posted and "hunter2hunter2" not in posted
    assert "[REDACTED:aws-access-key-id]" in posted


def test_metrics_show_the_last_verdict_per_cluster_and_check(served):
    served.processor.handle_body(spot_warning(served.world.facts["spot"]["interrupted"]), "sqs:m")
    families = {f.name: f for f in text_string_to_metric_families(served.metrics.render())}
    status = {s.labels["cluster"]: s.value for s in families["fmdoctor_status"].samples}
    assert status == {served.world.cluster: 2}
    critical = {s.labels["check"]: s.value for s in families["fmdoctor_findings"].samples
                if s.labels["severity"] == "critical"}
    assert critical["spot-interruption"] >= 1 and "efa-sg-self-reference" not in critical  # only spot checks ran
    events = {s.labels["outcome"]: s.value for s in families["fmdoctor_serve_events"].samples
              if s.name.endswith("_total")}
    assert events == {"delivered": 1}


def test_two_replicas_sharing_a_dedupe_table_post_each_event_once(served, fake_slack, caplog):
    """Two processors (replicas) on one serve.dedupe_table: EventBridge's second copy of an event reaching the
    other replica is a duplicate; an event a replica died on is left alone while its lease lasts, then handled
    once by the other, which answers in the Slack thread the first replica opened for the same alarm."""
    from slack_sdk import WebClient

    from fmdoctor.serve.dedupe import SharedLedger, create_table
    from fmdoctor.serve.outputs import SlackOutput, redactor
    from fmdoctor.serve.processor import Processor
    from fmdoctor.serve.state import Metrics
    from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL

    world = served.world
    dynamodb = world.session.client("dynamodb", region_name=world.region)
    create_table(dynamodb, "dedupe-two-replicas")
    now = [1_000_000.0]
    ledgers = [SharedLedger(dynamodb, "dedupe-two-replicas", 120, clock=lambda: now[0], owner=o) for o in "ab"]
    a = served.processor
    a.ledger = served.slack.shared = ledgers[0]
    b = Processor(a.router, a.investigator, [SlackOutput(WebClient(token=BOT_TOKEN, base_url=fake_slack.api_url),
                                                         CHANNEL, redactor(), shared=ledgers[1])],
                  ledgers[1], Metrics(), 256 * 1024)
    interrupted = world.facts["spot"]["interrupted"]
    caplog.set_level(logging.INFO, "fmdoctor.serve")
    try:
        assert a.handle_body(spot_warning(interrupted, "twice"), "sqs:copy-1") == ["delivered"]
        assert b.handle_body(spot_warning(interrupted, "twice"), "sqs:copy-2") == ["duplicate"]
        # Replica A received "killed" and claimed it, then died mid-investigation (no release, no renewal).
        assert ledgers[0].claim("killed")
        assert b.handle_body(spot_warning(interrupted, "killed"), "sqs:m (receive 2)") == ["in_progress"]
        now[0] += 121  # A's lease ran out, as its message's visibility timeout did
        assert b.handle_body(spot_warning(interrupted, "killed"), "sqs:m (receive 3)") == ["delivered"]
        assert b.handle_body(spot_warning(interrupted, "killed"), "sqs:late-copy") == ["duplicate"]
    finally:
        for ledger in ledgers:
            ledger.close()
    [opened] = [p for p in fake_slack.of("chat.postMessage") if not p.get("thread_ts")]
    # The second event is the same alarm again (same instance): B updates the message A opened, in its thread.
    [update] = fake_slack.of("chat.update")
    assert update["ts"] == fake_slack.replies("chat.postMessage")[0]["ts"] and "Spot interruption" in opened["text"]
    assert any("sqs:m (receive 2) killed" in r.getMessage() and "in_progress" in r.getMessage()
               for r in caplog.records)


# --- issue 35 item 6: every field sent to Slack and SNS is escaped and redacted ------------------------------
HOSTILE = "<!channel> <https://evil.example/login|Open the runbook> AKIAIOSFODNN7EXAMPLE"


def hostile_alert(cluster: str) -> dict:
    alert = json.loads(load("alertmanager-webhook.json"))
    for labels in (alert["commonLabels"], alert["alerts"][0]["labels"]):
        labels.update(cluster=cluster, fmdoctor_checks="spot-interruption", alertname=HOSTILE)
    return alert


def test_slack_top_level_text_and_resolved_message_carry_no_live_markup(served, fake_slack):
    alert = hostile_alert(served.world.cluster)
    assert served.processor.handle_body(json.dumps(alert), "webhook") == ["delivered"]
    alert["status"] = alert["alerts"][0]["status"] = "resolved"
    assert served.processor.handle_body(json.dumps(alert), "webhook") == ["resolved"]
    tops = [p["text"] for p in fake_slack.of("chat.postMessage") + fake_slack.of("chat.update")]
    assert any("resolved" in t for t in tops) and any("fmdoctor:" in t for t in tops)
    for text in tops:
        assert "<!channel>" not in text and "<https://evil" not in text and "AKIAIOSFODNN7EXAMPLE" not in text
    assert any("&lt;!channel&gt;" in t for t in tops if "resolved" in t)


def test_the_sns_subject_is_redacted(aws):
    from fmdoctor.serve.events import parse_body
    from fmdoctor.serve.investigate import Result
    from fmdoctor.serve.outputs import SnsOutput, redactor

    sns, sqs = aws.client("sns"), aws.client("sqs")
    topic = sns.create_topic(Name="fmdoctor-results")["TopicArn"]
    queue = sqs.create_queue(QueueName="results")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    [event] = parse_body(json.dumps(hostile_alert("llm-train")), 1 << 18)
    SnsOutput(sns, topic, redactor()).send(Result(event, "llm-train", None, narrative="n"))
    [message] = sqs.receive_message(QueueUrl=queue)["Messages"]
    envelope = json.loads(message["Body"])
    assert "AKIAIOSFODNN7EXAMPLE" not in envelope["Subject"] and "[REDACTED" in envelope["Subject"]
    assert "AKIAIOSFODNN7EXAMPLE" not in envelope["Message"]


def test_a_secret_the_slack_summary_cuts_is_redacted_whole(served, fake_slack):
    """Adversarial review: the event's detail was cut to 280 characters before the payload was redacted, so a
    secret key straddling the cut lost its tail, no longer matched, and 32 of its 40 characters were posted."""
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    alert = json.loads(load("alertmanager-webhook.json"))
    labels = alert["alerts"][0]["labels"]
    labels["cluster"] = alert["commonLabels"]["cluster"] = served.world.cluster
    labels["fmdoctor_checks"] = "spot-interruption"
    line = "x" * 236 + " aws_secret_access_key=" + secret  # the description is the detail; it is cut at 280
    assert len(line) > 280 > line.index(secret) + 16
    alert["alerts"][0]["annotations"]["description"] = line
    served.processor.handle_body(json.dumps(alert), "webhook")
    posted = json.dumps(fake_slack.of("chat.postMessage") + fake_slack.of("chat.update"))
    assert secret[:16] not in posted


def test_a_secret_at_the_events_own_cut_is_redacted_in_every_output(served, fake_slack):
    """Adversarial review: parsing caps each event text (the description at 300 characters) before anything is
    redacted; a secret key straddling that cap lost its tail, matched no pattern, and its first 38 characters
    went to Slack (and to the webhook, SNS and the model, which all start from the parsed event)."""
    from fmdoctor.serve.events import parse_body

    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    alert = json.loads(load("alertmanager-webhook.json"))
    labels = alert["alerts"][0]["labels"]
    labels["cluster"] = alert["commonLabels"]["cluster"] = served.world.cluster
    labels["fmdoctor_checks"] = "spot-interruption"
    alert["alerts"][0]["annotations"]["description"] = "x" * 238 + " aws_secret_access_key=" + secret
    [event] = parse_body(json.dumps(alert), 1 << 18)
    assert secret[:16] not in json.dumps(event.to_json()) and "[REDACTED" in event.detail
    served.processor.handle_body(json.dumps(alert), "webhook")
    assert secret[:16] not in json.dumps(fake_slack.of("chat.postMessage") + fake_slack.of("chat.update"))
