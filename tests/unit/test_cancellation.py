"""A cancelled run (Esc, quitting the app) stops checks under way at their next AWS call, not only the checks
that have not started: the app can quit at once instead of waiting for them."""

from __future__ import annotations

import threading

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import Status


def test_a_check_under_way_stops_at_its_next_aws_call(sg_fault_cluster):
    """Which check gets the one worker first is not fixed (each check has a thread; engine/slots), so the test
    holds what must be true in every order: the check under way when the run is cancelled makes no further AWS
    call, and every check that had not started by then is skipped as cancelled."""
    cancel = threading.Event()
    settings = Settings.model_validate({"clusters": {sg_fault_cluster.cluster: {}}, "max_workers": 1})
    doctor = Doctor(settings=settings, connection=Connection(region="us-west-2"))
    started_before_cancel: set[str] = set()

    def progress(event):
        if event.phase == "started" and not cancel.is_set():
            started_before_cancel.add(event.check_id)
            if event.check_id == "s3-unreachable":
                cancel.set()  # it has started; the route tables of the inventory's VPCs come next

    # (placement-group's DescribePlacementGroups and the Spot checks' DescribeInstanceStatus no longer come after
    # their check's start: they are prefetched before the inventory, fmdoctor.engine.prefetch)
    only = ["efa-sg-self-reference", "s3-unreachable", "gpu-idle"]
    report = doctor.check(sg_fault_cluster.cluster, only=only, progress=progress, cancel=cancel)
    assert "ec2.DescribeRouteTables" not in report.stats.api_calls
    skipped = {s.check: s.reason for s in report.skipped}
    assert skipped["s3-unreachable"] == "cancelled"
    not_started = set(only) - started_before_cancel
    assert {c: skipped.get(c) for c in not_started} == dict.fromkeys(not_started, "cancelled")
    assert report.errors == []


def test_a_run_cancelled_before_discovery_says_so(sg_fault_cluster):
    cancel = threading.Event()
    cancel.set()
    doctor = Doctor(settings=Settings.model_validate({"clusters": {sg_fault_cluster.cluster: {}}}),
                    connection=Connection(region="us-west-2"))
    report = doctor.check(sg_fault_cluster.cluster, only=["placement-group"], cancel=cancel)
    assert report.status is Status.UNKNOWN and report.stats.api_calls == {}
    assert [(s.check, s.reason) for s in report.skipped] == [("placement-group", "cancelled")]
