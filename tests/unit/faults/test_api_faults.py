"""AWS answering with errors: throttling, AccessDenied and truncated listings, injected at botocore's
before-send hook (tests/fault_injection.py: FaultInjector) so the real retry, parsing and engine paths run.

The rule under test: a fault costs exactly what it touches. The checks that needed the broken call say so
(an error entry with the code and, for a denial, the IAM action), the rest still report, and the verdict is
never 'ok' for something that was not verified; 'unknown' (exit 3) only when nothing could be verified.
"""

from __future__ import annotations

import pytest

from fmdoctor.engine.model import Status

from .conftest import FAMILIES


@pytest.mark.parametrize(("service", "operation", "code", "family"), [
    ("cloudwatch", "GetMetricData", "Throttling", "gpu"),  # JSON protocol
    ("sqs", "ReceiveMessage", "RequestThrottled", "spot"),  # JSON protocol, SQS's own code
    ("s3", "ListObjectsV2", "SlowDown", "checkpoint"),  # REST-XML
    ("ec2", "DescribeSpotInstanceRequests", "RequestLimitExceeded", "spot"),  # EC2 query
])
def test_throttling_that_outlasts_the_retries_is_reported_never_healthy(
        world, run_world, faults, retry_sleeps, service, operation, code, family):
    faults.throttle(service, operation, code=code)
    report = run_world()
    assert faults.injected[f"{service}.{operation}"] == 5  # standard mode: 5 attempts, then give up
    assert len(retry_sleeps) >= 4
    failed = {e.check for e in report.errors}
    assert failed == set(FAMILIES[family])
    assert {e.code for e in report.errors} == {code}
    assert all("still throttled after retries" in e.message for e in report.errors)
    assert report.status is Status.WARNING and report.exit_code == 1  # the other families still verified
    assert set(report.stats.checks_run) >= {c for f, ids in FAMILIES.items() if f != family for c in ids}


@pytest.mark.parametrize(("service", "operation"), [
    ("cloudwatch", "ListMetrics"), ("sqs", "GetQueueAttributes"), ("s3", "ListObjectsV2"),
    ("ec2", "DescribePlacementGroups"),
])
def test_throttling_within_the_retries_is_invisible(world, run_world, faults, service, operation):
    faults.throttle(service, operation, times=3)
    report = run_world()
    assert faults.injected[f"{service}.{operation}"] == 3
    assert report.errors == [] and report.status is Status.OK


@pytest.mark.parametrize(("service", "operation", "action", "family"), [
    ("cloudwatch", "ListMetrics", "cloudwatch:ListMetrics", "gpu"),
    ("s3", "ListObjectsV2", "s3:ListBucket", "checkpoint"),  # the IAM action, not the API name
    ("ec2", "DescribePlacementGroups", "ec2:DescribePlacementGroups", "placement"),
])
def test_access_denied_on_one_api_names_the_action_and_the_rest_report(
        world, run_world, faults, service, operation, action, family):
    faults.deny(service, operation)
    report = run_world()
    assert {e.check for e in report.errors} == set(FAMILIES[family])
    assert {(e.code, e.iam_action) for e in report.errors} == {("AccessDenied", action)}
    assert report.findings == [] and report.status is Status.WARNING and report.exit_code == 1
    others = {c for f, ids in FAMILIES.items() if f != family for c in ids}
    assert others <= set(report.stats.checks_run)


def test_spot_sources_all_denied_is_not_a_healthy_spot_verdict(world, run_world, faults):
    faults.deny("ec2", "DescribeSpotInstanceRequests", code="UnauthorizedOperation")
    faults.deny("sqs", "GetQueueAttributes")
    partly = run_world("spot")
    # The scheduled events (DescribeInstanceStatus) still answered: verified in part, so a warning, not ok.
    assert {e.iam_action for e in partly.errors} == {"ec2:DescribeSpotInstanceRequests", "sqs:GetQueueAttributes"}
    assert partly.findings == [] and partly.status is Status.WARNING
    faults.deny("ec2", "DescribeInstanceStatus", code="UnauthorizedOperation")
    report = run_world("spot")
    assert {e.check for e in report.errors} == set(FAMILIES["spot"])
    assert {e.iam_action for e in report.errors} == {"ec2:DescribeSpotInstanceRequests", "sqs:GetQueueAttributes",
                                                     "ec2:DescribeInstanceStatus"}
    assert report.findings == []
    assert report.status is Status.UNKNOWN and report.exit_code == 3  # no source answered: nothing verified


def test_exit_3_when_every_source_of_every_selected_check_failed(world, run_world, faults):
    faults.deny("cloudwatch", "ListMetrics")
    faults.deny("s3", "ListObjectsV2")
    report = run_world("gpu", "checkpoint")
    assert {e.check for e in report.errors} == set(FAMILIES["gpu"] + FAMILIES["checkpoint"])
    assert {e.iam_action for e in report.errors} == {"cloudwatch:ListMetrics", "s3:ListBucket"}
    assert report.stats.checks_run == [] and report.status is Status.UNKNOWN and report.exit_code == 3


def test_a_check_that_verified_part_of_its_claim_still_counts_as_run(world, run_world, faults):
    """placement-group reads membership from the instances and only the strategy from the denied API."""
    faults.deny("ec2", "DescribePlacementGroups", code="UnauthorizedOperation")
    faults.deny("cloudwatch", "ListMetrics")
    report = run_world("placement", "gpu")
    [placement] = [e for e in report.errors if e.check == "placement-group"]
    assert "strategy" in placement.unverified
    assert report.stats.checks_run == ["placement-group"] and report.exit_code == 1


@pytest.mark.parametrize(("service", "operation", "tokens", "family"), [
    ("cloudwatch", "ListMetrics", {}, "gpu"),
    ("s3", "ListObjectsV2", {"output_token": "NextContinuationToken", "input_token": "ContinuationToken",
                             "more": {"IsTruncated": True}}, "checkpoint"),
    ("ec2", "DescribeSpotInstanceRequests", {}, "spot"),
])
def test_a_listing_whose_next_page_fails_is_not_read_as_complete(
        world, run_world, faults, service, operation, tokens, family):
    faults.truncate(service, operation, **tokens)
    report = run_world()
    assert faults.injected[f"{service}.{operation}:truncated"] >= 1 and faults.injected[f"{service}.{operation}"] >= 1
    assert {e.check for e in report.errors} == set(FAMILIES[family])
    assert {e.code for e in report.errors} == {"InvalidNextToken"}
    assert report.status is not Status.OK


def test_truncated_instance_listing_means_unknown_not_a_smaller_cluster(world, run_world, faults):
    faults.truncate("ec2", "DescribeInstances", code="InvalidParameterValue")
    report = run_world()
    [error] = report.errors
    assert (error.check, error.code) == ("inventory", "InvalidParameterValue")
    assert report.findings == [] and report.status is Status.UNKNOWN and report.exit_code == 3
