"""The policy `fmdoctor iam-policy --only ID` prints lets `fmdoctor check --only ID` make every call it makes."""

from __future__ import annotations

import pytest

from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.errors import iam_action_for
from fmdoctor.engine.registry import default_registry
from fmdoctor.iam_policy import iam_policy

REGISTRY = default_registry()
CLUSTER_CHECKS = [c.id for c in REGISTRY.select(None)]


@pytest.fixture(scope="module")
def demo():
    from fmdoctor.demo.runtime import demo_environment, demo_settings

    with demo_environment() as world:
        yield Doctor(settings=demo_settings(world), connection=Connection(region=world.region)), world.cluster


def test_cluster_checks_are_listed():
    assert "efa-subnet-spread" in CLUSTER_CHECKS and "endpoint-unhealthy" in CLUSTER_CHECKS


@pytest.mark.parametrize("check_id", CLUSTER_CHECKS)
def test_each_checks_own_policy_covers_every_call_of_its_run(check_id, demo):
    doctor, cluster = demo
    report = doctor.check(cluster, only=[check_id])
    assert report.stats.checks_run == [check_id]
    policy, _ = iam_policy([REGISTRY.get(check_id)], [])
    granted = {a for s in policy["Statement"] for a in s["Action"]}
    made = {iam_action_for(*call.split(".", 1)) for call in report.stats.api_calls}
    assert made and sorted(made - granted) == []
