"""endpoint-unhealthy: Failed/OutOfService/rollback-failed endpoints, stuck transitions, failed updates."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fmdoctor.engine.model import Severity, Status

ONLY = ["endpoint-unhealthy"]


def test_in_service_endpoint_is_healthy(endpoints, infer):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    report = infer(ONLY)
    assert report.findings == [] and report.errors == []
    assert report.status is Status.OK and report.stats.checks_run == ONLY


@pytest.mark.parametrize("status", ["Failed", "OutOfService", "UpdateRollbackFailed"])
def test_broken_endpoint_is_critical_with_its_failure_reason(endpoints, infer, endpoint_state, status):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    reason = "The primary container for production variant AllTraffic did not pass the ping health check."
    endpoint_state("chat", status, reason)
    [finding] = infer(ONLY).findings
    assert finding.severity is Severity.CRITICAL
    assert finding.resource == "endpoint/chat"
    assert finding.evidence["status"] == status
    assert finding.evidence["failure_reason"] == reason
    assert finding.evidence["endpoint_config"] == "chat-config"
    assert "did not pass the ping health check" in finding.summary


def test_updating_beyond_stuck_after_is_critical_but_a_fresh_update_is_not(endpoints, infer, endpoint_state, at):
    endpoints.endpoint("stuck", "ml.g4dn.xlarge")
    endpoints.endpoint("rolling", "ml.g4dn.xlarge")
    endpoint_state("stuck", "Updating", modified=at - timedelta(hours=2, minutes=5))
    endpoint_state("rolling", "Updating", modified=at - timedelta(minutes=20))
    [finding] = infer(ONLY, inference={"stuck_after": "1h"}).findings
    assert finding.resource == "endpoint/stuck"
    assert finding.evidence["in_status_for"] == "2h5m" and finding.evidence["stuck_after"] == "1h"
    assert "Updating for 2h5m" in finding.summary


def test_creating_within_threshold_and_deleting_are_not_findings(endpoints, infer, endpoint_state, at):
    endpoints.endpoint("new", "ml.g4dn.xlarge")
    endpoints.endpoint("going", "ml.g4dn.xlarge")
    endpoint_state("new", "Creating", modified=at - timedelta(minutes=10))
    endpoint_state("going", "Deleting", modified=at - timedelta(hours=5))
    assert infer(ONLY).findings == []


def test_in_service_with_failure_reason_is_a_rolled_back_update(endpoints, infer, endpoint_state):
    endpoints.endpoint("chat", "ml.g4dn.xlarge")
    endpoint_state("chat", "InService", "Image 123.dkr.ecr/llm:v2 does not exist.")
    [finding] = infer(ONLY).findings
    assert finding.severity is Severity.WARNING
    assert "last update failed and was rolled back" in finding.summary
    assert "llm:v2 does not exist" in finding.summary
