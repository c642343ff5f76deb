"""capacity-block-expiring against moto EC2 and SQS. moto has no Capacity Blocks: fmdoctor.demo.moto_capacity
answers DescribeCapacityReservations in the API's shape and honours RunInstances' capacity-block market type;
the reservation reader is also run against botocore's Stubber, which validates the response against the
real API model. The expiration warning is the EC2 user guide's sample (tests/fixtures/events)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from fmdoctor.demo.moto_capacity import grant_capacity_block
from fmdoctor.demo.seed_health import dcp_files, write_checkpoint
from fmdoctor.engine.model import Severity, Status
from fmdoctor.spot.capacity import describe_capacity_blocks

from ..conftest import REGION

ID = "capacity-block-expiring"
EVENTS = Path(__file__).resolve().parent.parent / "fixtures" / "events"


@pytest.fixture
def block(builder, aws):
    """Two p5 nodes launched into a Capacity Block (its end set per test), one on-demand head node."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["head"], "m5.8xlarge", "private-a", ["efa"], role="head")

    def make(ends_in: timedelta, reservation_type: str = "capacity-block") -> str:
        now = datetime.now(UTC)
        reservation = grant_capacity_block(aws, REGION, "p5.48xlarge", f"{REGION}a", 2, now - timedelta(days=6),
                                           now + ends_in, reservation_type)
        builder.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32,
                       capacity_block=reservation)
        return reservation

    return make


def checkpoints(aws, minutes_ago, max_age="30m"):
    aws.client("s3").create_bucket(Bucket="ckpt", CreateBucketConfiguration={"LocationConstraint": REGION})
    for step, age in ((100, minutes_ago + 30), (200, minutes_ago)):
        write_checkpoint(aws, "ckpt", "run/", f"step-{step}", dcp_files(2), datetime.now(UTC) - timedelta(minutes=age))
    return {"locations": ["s3://ckpt/run/"], "max_age": max_age}


def minutes_between(start, end) -> int:
    start = start if isinstance(start, datetime) else datetime.fromisoformat(start)
    return max(int((datetime.fromisoformat(end) - start).total_seconds() // 60), 0)


def expiration_warning(reservation: str, ends_in: timedelta) -> str:
    """The user guide's sample, for this reservation, as EventBridge delivers it (now, 40 minutes before the end)."""
    event = json.loads((EVENTS / "aws-capacity-block-expiration-warning.json").read_text())
    now = datetime.now(UTC)
    event["detail"] = {"capacity-reservation-id": reservation,
                       "end-date": (now + ends_in).strftime("%Y-%m-%dT%H:%M:%SZ")}
    event["time"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps(event)


def test_block_ending_within_the_window_with_fresh_checkpoints_is_a_warning(block, aws, run_checks):
    reservation = block(timedelta(hours=2))
    report = run_checks([ID], checkpoints=checkpoints(aws, 10))
    [finding] = report.findings
    assert (finding.resource, finding.severity) == (reservation, Severity.WARNING)
    evidence = finding.evidence
    assert len(evidence["nodes"]) == 2 and evidence["instance_type"] == "p5.48xlarge"
    ends = datetime.fromisoformat(evidence["end_date"])
    assert datetime.fromisoformat(evidence["terminations_begin"]) == ends - timedelta(minutes=30)
    assert evidence["minutes_left"] == minutes_between(report.generated_at, evidence["terminations_begin"])
    assert 80 <= evidence["minutes_left"] <= 90  # 2 hours less 30 minutes, less the time seeding took
    assert evidence["checkpoint"] == "s3://ckpt/run/step-200/" and evidence["proof"]["method"] == "framework marker"
    assert "extend the block" in finding.summary and "gpu-1" in finding.summary
    assert report.stats.api_calls["ec2.DescribeCapacityReservations"] == 1 and report.errors == []


def test_block_about_to_end_with_stale_work_is_critical(block, aws, run_checks, builder):
    """The expiration warning is in the queue (35 minutes left): terminations begin in 5 minutes, and the
    newest usable checkpoint is 50 minutes old against a 30-minute interval."""
    reservation = block(timedelta(minutes=35))
    url = aws.client("sqs").create_queue(QueueName="spot-events")["QueueUrl"]
    aws.client("sqs").send_message(QueueUrl=url, MessageBody=expiration_warning(reservation, timedelta(minutes=35)))
    report = run_checks([ID], checkpoints=checkpoints(aws, 50), spot={"queue_url": url})
    [finding] = report.findings
    assert finding.severity is Severity.CRITICAL and report.status is Status.CRITICAL
    assert finding.evidence["expiration_warning"]["reference"]
    evidence = finding.evidence
    assert evidence["minutes_left"] == minutes_between(report.generated_at, evidence["terminations_begin"]) <= 5
    assert evidence["minutes_lost"] == minutes_between(evidence["checkpoint_last_modified"],
                                                       evidence["terminations_begin"]) >= 54
    assert "extend the block" not in finding.summary  # under an hour left: too late to extend


def test_block_ending_after_the_window_is_healthy(block, aws, run_checks):
    block(timedelta(days=2))
    saved = checkpoints(aws, 10)
    report = run_checks([ID], checkpoints=saved)
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    [wider] = run_checks([ID], checkpoints=saved, capacity_blocks={"expiry_window": "3d"}).findings
    assert wider.severity is Severity.WARNING and wider.evidence["expiry_window"] == "3d"


def test_on_demand_capacity_reservations_and_plain_nodes_are_not_applicable(block, builder, run_checks):
    block(timedelta(hours=1), reservation_type="default")
    report = run_checks([ID])
    assert report.skipped[0].check == ID and "On-Demand Capacity Reservations" in report.skipped[0].reason


def test_cluster_without_reserved_nodes_is_not_applicable(builder, run_checks):
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", [builder.security_group("sg")])
    report = run_checks([ID])
    assert "no node of cluster" in report.skipped[0].reason and report.stats.api_calls.get(
        "ec2.DescribeCapacityReservations") is None


def test_denied_reservations_without_a_warning_is_unknown_not_healthy(block, run_with_faults, faults):
    block(timedelta(hours=1))
    faults.deny("ec2", "DescribeCapacityReservations")
    report = run_with_faults([ID])
    assert report.findings == [] and report.status is Status.UNKNOWN
    [error] = report.errors
    assert error.iam_action == "ec2:DescribeCapacityReservations"


def test_the_warning_alone_still_reports_the_block(block, aws, run_with_faults, faults):
    reservation = block(timedelta(minutes=38))
    url = aws.client("sqs").create_queue(QueueName="spot-events")["QueueUrl"]
    aws.client("sqs").send_message(QueueUrl=url, MessageBody=expiration_warning(reservation, timedelta(minutes=38)))
    faults.deny("ec2", "DescribeCapacityReservations")
    report = run_with_faults([ID], spot={"queue_url": url})
    [finding] = report.findings
    assert finding.resource == reservation and finding.evidence["expiration_warning"] is not None
    assert {e.code for e in report.errors} >= {"AccessDenied"}  # the describe, and the checkpoints unconfigured


def test_reservation_reader_against_the_real_response_shape():
    ec2 = boto3.client("ec2", region_name=REGION)
    end = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
            {"CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "p5.48xlarge",
             "AvailabilityZone": "us-west-2a", "State": "active", "EndDate": end, "EndDateType": "limited",
             "ReservationType": "capacity-block", "CapacityBlockId": "cb-0123456789abcdef0",
             "TotalInstanceCount": 4, "AvailableInstanceCount": 0},
            {"CapacityReservationId": "cr-0fedcba9876543210", "InstanceType": "p4d.24xlarge",
             "AvailabilityZone": "us-west-2a", "State": "active", "ReservationType": "default",
             "EndDateType": "unlimited"},
        ]}, {"CapacityReservationIds": ["cr-0123456789abcdef0", "cr-0fedcba9876543210"]})
        blocks = describe_capacity_blocks(ec2, ["cr-0fedcba9876543210", "cr-0123456789abcdef0"])
    assert blocks["cr-0fedcba9876543210"] is None
    block = blocks["cr-0123456789abcdef0"]
    assert block.ends == end and block.terminations_begin == end - timedelta(minutes=30)
