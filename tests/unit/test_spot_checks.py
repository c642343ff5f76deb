"""spot-interruption, spot-rebalance and spot-interruption-unprotected against moto EC2 and SQS, with
aws-node-termination-handler's own events and AWS's samples (tests/fixtures/events) in the queue."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fmdoctor.demo.moto_capacity import schedule_instance_event
from fmdoctor.demo.moto_health import mark_spot_request
from fmdoctor.demo.seed_health import dcp_files, eventbridge_event, write_checkpoint
from fmdoctor.engine.model import Severity, Status
from fmdoctor.spot import sources
from fmdoctor.spot.events import INTERRUPTION_EVENT, REBALANCE_EVENT

from ..conftest import CLUSTER, REGION

IDS = ["spot-interruption", "spot-rebalance", "spot-interruption-unprotected"]
EVENTS = Path(__file__).resolve().parent.parent / "fixtures" / "events"


@pytest.fixture
def cluster(builder, aws):
    """gpu-1 on demand, gpu-2 and gpu-3 on Spot; a queue an EventBridge rule would feed."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa"])
    builder.launch(["gpu-2", "gpu-3"], "p4d.24xlarge", "private-a", ["efa"], spot=True)
    sqs = aws.client("sqs")
    builder.queue_url = sqs.create_queue(QueueName="spot-events")["QueueUrl"]
    return builder


def send(aws, url, *bodies):
    for body in bodies:
        aws.client("sqs").send_message(QueueUrl=url, MessageBody=body)


def warning(instance_id, seconds_ago=20, kind=INTERRUPTION_EVENT, **detail):
    if kind == INTERRUPTION_EVENT:
        detail.setdefault("instance-action", "terminate")
    time = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return eventbridge_event(kind, instance_id, time, REGION, "123456789012", **detail)


def visible_to_another_consumer(aws, url):
    """What a second consumer (the node termination handler) receives after fmdoctor ran."""
    reply = aws.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
    return sorted(json.loads(m["Body"])["detail"]["instance-id"] for m in reply.get("Messages", []))


def test_no_notices_is_healthy_and_reads_each_source_once(cluster, aws, run_checks):
    report = run_checks(IDS, spot={"queue_url": cluster.queue_url})
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    calls = report.stats.api_calls
    assert calls["ec2.DescribeSpotInstanceRequests"] == 1  # both Spot nodes in one filtered call
    assert calls["ec2.DescribeInstanceStatus"] == 1  # scheduled events of every node, filtered by event code
    assert calls["sqs.GetQueueAttributes"] == 1 and calls["sqs.ReceiveMessage"] == 1
    assert not any("Delete" in op or "ChangeMessageVisibility" in op for op in calls)


def test_interruption_warning_in_the_queue_stays_visible_to_other_consumers(cluster, aws, run_checks):
    gpu2 = cluster.nodes["gpu-2"]
    send(aws, cluster.queue_url, warning(gpu2), warning(cluster.nodes["gpu-3"], kind=REBALANCE_EVENT))
    report = run_checks(IDS, spot={"queue_url": cluster.queue_url})
    [finding] = report.findings_for("spot-interruption")
    assert (finding.resource, finding.severity) == (gpu2, Severity.CRITICAL)
    assert finding.evidence["action"] == "terminate" and 95 <= finding.evidence["seconds_left"] <= 100
    assert [n["source"] for n in finding.evidence["notices"]] == ["sqs"]
    assert "gpu-2" in finding.summary and "will be terminated by EC2 Spot in about 1m" in finding.summary
    [rebalance] = report.findings_for("spot-rebalance")
    assert (rebalance.resource, rebalance.severity) == (cluster.nodes["gpu-3"], Severity.WARNING)
    # Nothing consumed, nothing hidden: the other consumer still gets both events, right away.
    assert visible_to_another_consumer(aws, cluster.queue_url) == sorted([gpu2, cluster.nodes["gpu-3"]])
    assert report.errors[0].check == "spot-interruption-unprotected"  # no checkpoint configured: unverified


def test_ec2_spot_request_marked_for_termination(cluster, aws, run_checks):
    gpu3 = cluster.nodes["gpu-3"]
    request = mark_spot_request(aws, REGION, gpu3, "marked-for-termination", "marked", datetime.now(UTC))
    [finding] = run_checks(["spot-interruption"]).findings
    assert finding.resource == gpu3
    [notice] = finding.evidence["notices"]
    assert (notice["source"], notice["reference"]) == ("ec2", request)
    assert notice["detail"].startswith("marked-for-termination")


def test_an_interruption_under_way_says_so(cluster, aws, run_checks):
    mark_spot_request(aws, REGION, cluster.nodes["gpu-2"], "instance-terminated-by-price", "terminated",
                      datetime.now(UTC) - timedelta(seconds=30))
    [finding] = run_checks(["spot-interruption"]).findings
    assert finding.evidence["seconds_left"] == 0
    assert "is being terminated by EC2 Spot now (its interruption time" in finding.summary


def test_only_current_notices_for_this_clusters_instances_count(cluster, aws, run_checks):
    send(aws, cluster.queue_url,
         warning("i-0f1e2d3c4b5a69788"),  # another cluster's node
         warning(cluster.nodes["gpu-2"], seconds_ago=3600),  # acted on an hour ago: history
         warning(cluster.nodes["gpu-1"], kind="EC2 Instance State-change Notification", state="running"))
    report = run_checks(IDS, spot={"queue_url": cluster.queue_url})
    assert report.findings == [] and report.errors == []


def test_malformed_messages_are_reported_and_the_rest_still_read(cluster, aws, run_checks):
    send(aws, cluster.queue_url, "{not json", json.dumps({"detail-type": INTERRUPTION_EVENT, "detail": {}}),
         warning(cluster.nodes["gpu-2"]))
    report = run_checks(["spot-interruption"], spot={"queue_url": cluster.queue_url})
    assert [f.resource for f in report.findings] == [cluster.nodes["gpu-2"]]
    [error] = report.errors
    assert error.code == "MalformedEvent" and error.unverified.startswith("2 messages")
    assert report.status is Status.CRITICAL


def test_a_queue_that_does_not_exist_is_an_error_entry(cluster, aws, run_checks):
    mark_spot_request(aws, REGION, cluster.nodes["gpu-2"], "marked-for-stop", "marked", datetime.now(UTC))
    missing = cluster.queue_url.replace("spot-events", "no-such-queue")
    report = run_checks(["spot-interruption"], spot={"queue_url": missing})
    [error] = report.errors
    assert "NonExistentQueue" in error.code or error.code == "QueueDoesNotExist"
    assert error.iam_action == "sqs:GetQueueAttributes" and missing in error.unverified
    # The EC2 source still answered.
    assert [f.evidence["action"] for f in report.findings] == ["stop"]


def test_a_queue_with_a_redrive_policy_is_not_read(cluster, aws, run_checks):
    sqs = aws.client("sqs")
    dlq = sqs.create_queue(QueueName="spot-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName="spot-with-dlq", Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"})})["QueueUrl"]
    send(aws, url, warning(cluster.nodes["gpu-2"]))
    report = run_checks(["spot-interruption"], spot={"queue_url": url})
    assert [e.code for e in report.errors] == ["QueueHasRedrivePolicy"]
    assert "sqs.ReceiveMessage" not in report.stats.api_calls
    assert visible_to_another_consumer(aws, url) == [cluster.nodes["gpu-2"]]  # not pushed to the DLQ


def test_more_messages_than_one_receive_says_what_it_could_not_see(cluster, aws, run_checks):
    send(aws, cluster.queue_url, *[warning(f"i-0f1e2d3c4b5a6{n:04d}") for n in range(14)])
    report = run_checks(["spot-interruption"], spot={"queue_url": cluster.queue_url})
    [error] = report.errors
    assert error.code == "QueuePartiallyRead" and "4 of about 14" in error.unverified
    assert report.stats.api_calls["sqs.ReceiveMessage"] == 2  # the second receive brought nothing new


def test_spot_requests_are_batched_by_filter_size(cluster, aws, run_checks, monkeypatch):
    monkeypatch.setattr(sources, "FILTER_VALUES_MAX", 1)
    report = run_checks(["spot-interruption"])
    assert report.stats.api_calls["ec2.DescribeSpotInstanceRequests"] == 2 and report.findings == []


def test_on_demand_only_has_no_rebalance_but_scheduled_events_are_read(builder, run_checks):
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", [builder.security_group("sg")])
    report = run_checks(IDS)
    [skipped] = report.skipped
    assert skipped.check == "spot-rebalance" and "no Spot instances" in skipped.reason
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    calls = report.stats.api_calls
    assert calls["ec2.DescribeInstanceStatus"] == 1 and "ec2.DescribeSpotInstanceRequests" not in calls
    assert calls.get("sqs.ReceiveMessage") is None


def _checkpoints(aws, minutes_ago):
    aws.client("s3").create_bucket(Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": REGION})
    for step, age in ((100, minutes_ago + 30), (200, minutes_ago)):
        write_checkpoint(aws, "ckpt", "run/", f"step-{step}", dcp_files(2), datetime.now(UTC) - timedelta(minutes=age))
    return {"locations": ["s3://ckpt/run/"], "max_age": "30m"}


def test_interruption_with_an_old_checkpoint_is_unprotected(cluster, aws, run_checks):
    send(aws, cluster.queue_url, warning(cluster.nodes["gpu-2"]))
    report = run_checks(IDS, spot={"queue_url": cluster.queue_url}, checkpoints=_checkpoints(aws, 50))
    [finding] = report.findings_for("spot-interruption-unprotected")
    assert finding.severity is Severity.CRITICAL and finding.resource == cluster.nodes["gpu-2"]
    assert finding.evidence["minutes_lost"] == 51  # at the interruption time, in 1m40s
    assert finding.evidence["checkpoint"] == "s3://ckpt/run/step-200/"
    assert "about 51 minutes of work will be lost" in finding.summary
    assert finding.evidence["proof"]["framework"] == "PyTorch DCP" and finding.evidence["proof"]["proven"]
    assert finding.evidence["usable_because"] == "proven whole by PyTorch DCP's own marker"
    assert report.errors == []


def test_counted_past_a_save_only_a_comparison_calls_incomplete_is_a_warning(cluster, aws, run_checks):
    """No framework marker: the newer save (10 minutes old) is a third of its predecessor's size, so it is not
    counted as usable, but only a heuristic says so; if it is whole the node is protected. Never a critical."""
    aws.client("s3").create_bucket(Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": REGION})
    now = datetime.now(UTC)
    for step, age, size in ((100, 80, 9000), (200, 50, 9000), (300, 10, 3000)):
        write_checkpoint(aws, "ckpt", "run/", f"step-{step}", {"weights.bin": size, "extra.bin": 10},
                         now - timedelta(minutes=age))
    send(aws, cluster.queue_url, warning(cluster.nodes["gpu-2"]))
    settings = {"locations": ["s3://ckpt/run/"], "max_age": "30m"}
    report = run_checks(["spot-interruption-unprotected"], spot={"queue_url": cluster.queue_url}, checkpoints=settings)
    [finding] = report.findings
    assert finding.severity is Severity.WARNING and finding.evidence["checkpoint"] == "s3://ckpt/run/step-200/"
    assert finding.evidence["counted_past"] == "s3://ckpt/run/step-300/"
    assert finding.evidence["counted_past_proof"]["proven"] is False
    assert "only looks incomplete by a comparison" in finding.summary
    assert "not proven whole" in finding.evidence["usable_because"]


def test_interruption_with_a_fresh_checkpoint_is_protected(cluster, aws, run_checks):
    send(aws, cluster.queue_url, warning(cluster.nodes["gpu-2"]))
    report = run_checks(IDS, spot={"queue_url": cluster.queue_url}, checkpoints=_checkpoints(aws, 10))
    assert report.findings_for("spot-interruption") and not report.findings_for("spot-interruption-unprotected")
    assert report.errors == []


def test_spot_queue_flag(cluster, aws, capsys):
    from fmdoctor.cli.main import main

    send(aws, cluster.queue_url, warning(cluster.nodes["gpu-3"]))
    code = main(["check", "--cluster", CLUSTER, "--region", REGION, "--format", "json", "--no-progress",
                 "--only", "spot-interruption", "--spot-queue", cluster.queue_url])
    assert code == 2
    assert [f["resource"] for f in json.loads(capsys.readouterr().out)["findings"]] == [cluster.nodes["gpu-3"]]


# --- The queue aws-node-termination-handler also reads, and interruptions that are not Spot's -------------

def nth_event(name, instance_id=None, seconds_ago=20, **changes):
    """An event from tests/fixtures/events made current for one of our nodes, as NTH's e2e tests do it."""
    event = json.loads((EVENTS / f"{name}.json").read_text())
    if instance_id is not None:
        event["detail"]["instance-id"] = instance_id
        event["resources"] = [f"arn:aws:ec2:{REGION}b:instance/{instance_id}"]
    if "time" in event and event["time"]:
        event["time"] = (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    event.update(changes)
    return json.dumps(event)


def test_the_termination_handlers_other_messages_are_ignored_quietly(cluster, aws, run_checks):
    """Lifecycle-hook messages sent straight to SQS, their test notifications and state changes: not
    interruptions, not malformed; the run stays healthy and the evidence counts them."""
    send(aws, cluster.queue_url, *[nth_event(n) for n in (
        "nth-asg-lifecycle-direct", "nth-asg-test-notification-direct", "aws-asg-lifecycle-sqs",
        "aws-asg-test-notification-sqs", "nth-asg-lifecycle-eventbridge", "nth-state-change")],
        nth_event("nth-spot-itn", cluster.nodes["gpu-2"]))
    report = run_checks(["spot-interruption"], spot={"queue_url": cluster.queue_url})
    assert report.errors == []
    [finding] = report.findings
    assert finding.evidence["ignored_notices"] == {"Auto Scaling lifecycle-hook messages": 2,
                                                   "Auto Scaling test notifications": 2, "other events": 2}


def test_an_interruption_warning_without_a_time_is_happening_now(cluster, aws, run_checks):
    send(aws, cluster.queue_url, nth_event("nth-spot-itn-no-time", cluster.nodes["gpu-3"]))
    [finding] = run_checks(["spot-interruption"], spot={"queue_url": cluster.queue_url}).findings
    assert finding.resource == cluster.nodes["gpu-3"] and 115 <= finding.evidence["seconds_left"] <= 120
    assert "time_assumed" in finding.evidence["notices"][0]


def test_interruptible_capacity_reservation_is_reported_like_spot(cluster, aws, run_checks):
    gpu1 = cluster.nodes["gpu-1"]  # on demand, in an interruptible reservation
    when = (datetime.now(UTC) + timedelta(seconds=100)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = json.loads(nth_event("aws-capacity-reservation-interruption-warning", gpu1))
    body["detail"]["instance-termination-time"] = when
    send(aws, cluster.queue_url, json.dumps(body))
    report = run_checks(["spot-interruption", "spot-interruption-unprotected"], spot={"queue_url": cluster.queue_url},
                        checkpoints=_checkpoints(aws, 50))
    [finding] = report.findings_for("spot-interruption")
    assert finding.resource == gpu1 and finding.severity is Severity.CRITICAL
    assert "by EC2 (its interruptible Capacity Reservation is being reclaimed)" in finding.summary
    [unprotected] = report.findings_for("spot-interruption-unprotected")
    evidence = unprotected.evidence
    assert evidence["cause"] == "an interruptible Capacity Reservation"
    action, saved = (datetime.fromisoformat(evidence[k]) for k in ("action_time", "checkpoint_last_modified"))
    lost = action - saved
    assert evidence["minutes_lost"] == int(lost.total_seconds() // 60) >= 51


def test_scheduled_events_from_describe_instance_status(cluster, aws, run_checks):
    """EC2 schedules a retirement for an on-demand node (days ahead: a warning) and a reboot for a Spot node
    within the hour (critical); a completed event is history."""
    now = datetime.now(UTC)
    gpu1, gpu2 = cluster.nodes["gpu-1"], cluster.nodes["gpu-2"]
    schedule_instance_event(aws, REGION, gpu1, "instance-retirement", now + timedelta(days=3),
                            now + timedelta(days=4), "The instance is running on degraded hardware")
    schedule_instance_event(aws, REGION, gpu2, "system-reboot", now + timedelta(minutes=40),
                            now + timedelta(hours=2), "scheduled reboot")
    schedule_instance_event(aws, REGION, gpu2, "system-maintenance", now - timedelta(days=2),
                            now - timedelta(days=1), "[Completed] maintenance")
    report = run_checks(IDS, checkpoints=_checkpoints(aws, 10))
    by_node = {f.resource: f for f in report.findings_for("spot-interruption")}
    assert by_node[gpu1].severity is Severity.WARNING and "retired" in by_node[gpu1].summary
    assert by_node[gpu2].severity is Severity.CRITICAL and "rebooted" in by_node[gpu2].summary
    assert by_node[gpu2].evidence["notices"][0]["reference"].startswith("instance-event-")
    # Fresh checkpoints every 30 minutes: the job saves again before either event, so neither is unprotected.
    assert report.findings_for("spot-interruption-unprotected") == [] and report.errors == []


def test_a_scheduled_event_days_away_is_unprotected_only_when_checkpoints_stopped(cluster, aws, run_checks):
    now = datetime.now(UTC)
    schedule_instance_event(aws, REGION, cluster.nodes["gpu-1"], "instance-stop", now + timedelta(days=2),
                            now + timedelta(days=2, hours=2), "The instance is scheduled to stop")
    [finding] = run_checks(["spot-interruption-unprotected"], checkpoints=_checkpoints(aws, 50)).findings
    assert finding.evidence["cause"] == "an EC2 scheduled event" and finding.evidence["minutes_lost"] > 2 * 24 * 60
    assert "will be stopped by an EC2 scheduled event (instance-stop)" in finding.summary
