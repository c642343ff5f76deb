"""Sources that answer, but with data a check cannot take at face value: clocks that disagree, a queue
that disappears between two calls. (Metric gaps are covered where the GPU and EFA checks are tested:
test_gpu_checks.py's sparse/partial series and test_efa_errors.py's silent interfaces.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fmdoctor.demo.moto_health import mark_spot_request
from fmdoctor.engine.model import Status

from ...conftest import REGION
from .conftest import FAMILIES, LOCATION


def test_a_checkpoint_dated_days_ahead_is_not_called_fresh(world, run_world):
    world.save_checkpoint(300, datetime.now(UTC) + timedelta(days=3))  # written by a node whose clock is wrong
    report = run_world("checkpoint")
    [error] = report.errors
    assert (error.check, error.code) == ("checkpoint-stale", "ClockSkew")
    assert LOCATION in error.unverified and "step-000300" in error.unverified
    assert "ahead of this machine's clock" in error.message and "3d" in error.message
    assert report.status is Status.WARNING  # missing/incomplete were verified; staleness was not


def test_a_checkpoint_a_little_ahead_is_ordinary_clock_skew(world, run_world):
    world.save_checkpoint(300, datetime.now(UTC) + timedelta(minutes=2))
    report = run_world("checkpoint")
    assert report.errors == [] and report.status is Status.OK


def test_minutes_at_stake_are_not_computed_from_a_future_checkpoint(world, run_world, aws):
    world.save_checkpoint(300, datetime.now(UTC) + timedelta(hours=6))
    mark_spot_request(aws, REGION, world.nodes["gpu-3"], "marked-for-termination", "marked", datetime.now(UTC))
    report = run_world("spot")
    assert [f.check for f in report.findings] == ["spot-interruption"]  # the notice itself is still reported
    unprotected = [e for e in report.errors if e.check == "spot-interruption-unprotected"]
    assert [e.code for e in unprotected] == ["ClockSkew"]
    assert report.status is Status.CRITICAL


def test_a_queue_deleted_between_two_calls_is_an_error_and_ec2_still_answers(world, run_world, faults, aws):
    mark_spot_request(aws, REGION, world.nodes["gpu-3"], "marked-for-stop", "marked", datetime.now(UTC))
    faults.fail("sqs", "ReceiveMessage", "AWS.SimpleQueueService.NonExistentQueue",
                "The specified queue does not exist.")
    report = run_world("spot")
    assert {e.check for e in report.errors} == set(FAMILIES["spot"])
    assert {e.code for e in report.errors} == {"AWS.SimpleQueueService.NonExistentQueue"}
    assert all("interruption events in SQS queue" in e.unverified for e in report.errors)
    assert [f.evidence["action"] for f in report.findings if f.check == "spot-interruption"] == ["stop"]
    assert report.status is Status.CRITICAL
