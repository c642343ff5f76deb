"""The fault world under issue 39's concurrent loading: the same report whatever order AWS's answers come back in,
and every service throttled past its retries at once never reads as healthy.

Answers are delayed at botocore's ``before-send`` hook (moto still answers), by a seeded random draw per request,
so each run interleaves the checks, the shared loads and the pages differently.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import Aws, AwsOptions
from fmdoctor.engine.model import Report, Status

from ...conftest import CLUSTER, REGION
from ...fault_injection import Fault
from .conftest import FAMILIES

RUNS = 12
THROTTLING = {"ec2": "RequestLimitExceeded", "s3": "SlowDown", "sqs": "RequestThrottled"}  # else "Throttling"


def _jittered(seed: int, most_s: float) -> Any:
    rng, lock = random.Random(seed), threading.Lock()

    def delay(**_: Any) -> None:
        with lock:
            seconds = rng.uniform(0, most_s)
        time.sleep(seconds)

    def factory(options: AwsOptions, credentials: Any = None) -> Aws:
        aws = new_aws(options, credentials)
        aws.session.events.register_first("before-send", delay)
        return aws

    return factory


def _run(world: Any, factory: Any) -> Report:
    settings = Settings.model_validate({"clusters": {CLUSTER: world.settings}})
    return Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=factory).check(CLUSTER)


def _outcome(report: Report) -> tuple[Any, ...]:
    return (sorted((f.check, f.resource, f.severity.value) for f in report.findings),
            sorted((e.check, e.code, e.unverified) for e in report.errors),
            sorted((s.check, s.reason) for s in report.skipped), report.stats.checks_run, report.exit_code)


def test_the_report_does_not_depend_on_the_order_answers_arrive_in(world):
    """Twelve runs of every check, each request held 0-30 ms by its own seeded draw: one report, and one count of
    each API call (a load made twice under some interleaving would show here)."""
    world.save_checkpoint(300, datetime.now(UTC) - timedelta(hours=3))  # a stale newest checkpoint: a finding to keep
    first = _run(world, _jittered(0, 0.0))
    assert first.findings, "the world should hold a finding every run must keep"
    calls = first.stats.api_calls
    for seed in range(1, RUNS):
        report = _run(world, _jittered(seed, 0.03))
        assert _outcome(report) == _outcome(first), f"seed {seed}"
        assert report.stats.api_calls == calls, f"seed {seed}"


class _AnyCallOf(Fault):
    """Every operation of one service (but those in ``spared``) answers the service's throttling error."""

    spared: frozenset[str] = frozenset()

    def matches(self, service: str, operation: str, dry_run: bool, params: dict[str, Any]) -> bool:
        return service == self.service and operation not in self.spared


@pytest.fixture
def quick_adaptive_mode(monkeypatch):
    """The adaptive retry mode's client-side rate never drops under 200 requests a second, so a run throttled on
    every call does not wait out minutes of real time; when and how it retries is botocore's as ever."""
    from botocore.retries.bucket import TokenBucket

    monkeypatch.setattr(TokenBucket.__init__, "__defaults__", (200.0,))


def test_every_service_throttled_past_its_retries_leaves_no_check_healthy(world, faults, quick_adaptive_mode):
    """Only the instance listing answers (without it nothing runs at all); every other call of every service is
    throttled on each attempt. No check may come out verified: each either reports the throttling or has nothing
    to look at. (A check that verified part of its claim counts as run; here each that ran says what it missed.)"""
    for service in ("ec2", "cloudwatch", "s3", "sqs", "logs", "sagemaker", "fsx", "resourcegroupstaggingapi",
                    "application-autoscaling", "eks", "sts"):
        fault = _AnyCallOf(service, "*", THROTTLING.get(service, "Throttling"), "Rate exceeded", 400)
        fault.spared = frozenset({"DescribeInstances"}) if service == "ec2" else frozenset()
        faults._add(fault)
    settings = Settings.model_validate({"clusters": {CLUSTER: world.settings}})
    doctor = Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=faults.aws_factory)
    report = doctor.check(CLUSTER)
    assert faults.injected
    throttled = {e.check for e in report.errors if "throttled" in e.message}
    assert set(report.stats.checks_run) <= throttled, "a check verified what it could not read"
    assert {c for ids in FAMILIES.values() for c in ids} <= throttled
    # The rest found nothing to look at in what did answer (no Capacity Block, no scheduler, no admin CIDRs).
    ran = throttled | {s.check for s in report.skipped}
    assert ran == {c.id for c in doctor.registry.select(None)}
    assert all("throttled" not in s.reason for s in report.skipped)
    assert report.findings == [] and report.status is not Status.OK
