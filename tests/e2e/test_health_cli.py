"""Checkpoint, Spot, Capacity Block and HyperPod checks as users run them: the CLI over HTTP against moto's
server."""

from __future__ import annotations

import json

import pytest
import yaml

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo

pytestmark = pytest.mark.e2e


def test_health_checks_over_http(moto_server, fmdoctor_cli, tmp_path):
    world = seed_demo(moto_server.session())
    config = tmp_path / "fmdoctor.yaml"
    config.write_text(yaml.safe_dump({"clusters": {DEMO_CLUSTER: world.settings}}))
    base = ("check", "--region", "us-west-2", "--endpoint-url", moto_server.url, "--config", str(config),
            "--format", "json", "--no-progress")
    result = fmdoctor_cli(*base, "--cluster", DEMO_CLUSTER, "--only", "checkpoint,spot,capacity,hyperpod")
    assert result.code == 2, result.stderr
    report = result.json()
    assert {f["check"] for f in report["findings"]} == {
        "checkpoint-missing", "checkpoint-stale", "checkpoint-incomplete", "spot-interruption", "spot-rebalance",
        "spot-interruption-unprotected", "capacity-block-expiring", "hyperpod-node-unhealthy"}
    assert report["errors"] == []
    calls = report["stats"]["api_calls"]
    # One top-level listing per location (two), then the newest two checkpoints of the one that has any.
    assert calls["s3.ListObjectsV2"] == 4 and calls["sqs.ReceiveMessage"] == 1
    assert calls["ec2.DescribeSpotInstanceRequests"] == 1 and calls["sagemaker.ListClusterNodes"] == 1
    assert calls["ec2.DescribeInstanceStatus"] == 1 and calls["ec2.DescribeCapacityReservations"] == 1
    # The queue still holds every event for the node termination handler.
    sqs = moto_server.session().client("sqs")
    attrs = sqs.get_queue_attributes(QueueUrl=world.facts["spot"]["queue_url"],
                                     AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "5"

    hyperpod = fmdoctor_cli(*base, "--cluster", world.facts["hyperpod"]["cluster"], "--only", "hyperpod")
    assert hyperpod.code == 2, hyperpod.stderr
    [finding] = hyperpod.json()["findings"]
    assert json.dumps(finding["evidence"]["fix"]) == json.dumps(
        [{"action": "replace-hyperpod-node", "cluster_name": world.facts["hyperpod"]["cluster"],
          "node_id": world.facts["hyperpod"]["failed_node"]}])
