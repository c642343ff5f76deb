"""A cancelled run (Esc, quitting the app) stops checks under way at their next AWS call, not only the checks
that have not started: the app can quit at once instead of waiting for them."""

from __future__ import annotations

import threading

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import Status


def test_a_check_under_way_stops_at_its_next_aws_call(sg_fault_cluster):
    cancel = threading.Event()
    settings = Settings.model_validate({"clusters": {sg_fault_cluster.cluster: {}}, "max_workers": 1})
    doctor = Doctor(settings=settings, connection=Connection(region="us-west-2"))

    def progress(event):
        if event.check_id == "placement-group" and event.phase == "started":
            cancel.set()  # placement-group has started; its DescribePlacementGroups call comes next

    report = doctor.check(sg_fault_cluster.cluster, only=["efa-sg-self-reference", "placement-group", "gpu-idle"],
                          progress=progress, cancel=cancel)
    assert "ec2.DescribePlacementGroups" not in report.stats.api_calls
    assert {s.check: s.reason for s in report.skipped} == {"placement-group": "cancelled", "gpu-idle": "cancelled"}
    assert report.stats.checks_run == ["efa-sg-self-reference"] and report.errors == []


def test_a_run_cancelled_before_discovery_says_so(sg_fault_cluster):
    cancel = threading.Event()
    cancel.set()
    doctor = Doctor(settings=Settings.model_validate({"clusters": {sg_fault_cluster.cluster: {}}}),
                    connection=Connection(region="us-west-2"))
    report = doctor.check(sg_fault_cluster.cluster, only=["placement-group"], cancel=cancel)
    assert report.status is Status.UNKNOWN and report.stats.api_calls == {}
    assert [(s.check, s.reason) for s in report.skipped] == [("placement-group", "cancelled")]
