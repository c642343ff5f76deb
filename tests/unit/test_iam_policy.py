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


def test_serve_adds_its_queue_and_topic_only(tmp_path, capsys):
    import json

    from fmdoctor.cli.main import main

    config = tmp_path / "fmdoctor.yaml"
    config.write_text("serve:\n  queue_url: https://sqs.us-west-2.amazonaws.com/111122223333/fmdoctor-events\n"
                      "  sns_topic_arn: arn:aws:sns:us-west-2:111122223333:fmdoctor-results\n"
                      "  dedupe_table: fmdoctor-serve-dedupe\n")
    assert main(["iam-policy", "--serve", "--config", str(config)]) == 0
    statements = json.loads(capsys.readouterr().out)["Statement"]
    by_resource: dict[str, set[str]] = {}
    for statement in statements:
        by_resource.setdefault(statement["Resource"], set()).update(statement["Action"])
    assert by_resource["arn:aws:sqs:us-west-2:111122223333:fmdoctor-events"] == {
        "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:SendMessage"}
    assert by_resource["arn:aws:sns:us-west-2:111122223333:fmdoctor-results"] == {"sns:Publish"}
    assert by_resource["arn:aws:dynamodb:us-west-2:111122223333:table/fmdoctor-serve-dedupe"] == {
        "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"}  # the one table, no Scan or Query
    assert "ec2:DescribeInstances" in by_resource["*"]
    assert main(["iam-policy", "--config", str(config)]) == 0  # without --serve: nothing of it
    assert "sns:Publish" not in capsys.readouterr().out


def test_serve_without_a_queue_says_the_policy_is_wide(tmp_path, capsys):
    from fmdoctor.cli.main import main

    config = tmp_path / "fmdoctor.yaml"
    config.write_text("serve: {}\n")
    assert main(["iam-policy", "--serve", "--config", str(config)]) == 0
    captured = capsys.readouterr()
    assert "every queue" in captured.err and "arn:aws:sqs:*:*:*" in captured.out
