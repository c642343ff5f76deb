"""``fmdoctor check`` as users run it: a subprocess, real boto3 over HTTP, moto's server on 127.0.0.1."""

from __future__ import annotations

import json
import time

import pytest

from fmdoctor.demo.builders import ClusterBuilder
from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo

pytestmark = pytest.mark.e2e

EXPECTED_CALLS = {
    "ec2.DescribeInstanceTypes": 1,
    "ec2.DescribeInstances": 1,
    "ec2.DescribePlacementGroups": 1,
    "ec2.DescribeSecurityGroupRules": 1,
    "ec2.DescribeSecurityGroups": 1,
    "ec2.DescribeSubnets": 1,
}


def test_broken_cluster_over_http(moto_server, fmdoctor_cli, tmp_path):
    world = seed_demo(moto_server.session())
    config = tmp_path / "fmdoctor.yaml"  # the demo's own settings (its nodes count as settled: startup_grace 0s)
    config.write_text(json.dumps({"clusters": {DEMO_CLUSTER: world.settings}}))  # JSON is YAML
    result = fmdoctor_cli("check", "--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url",
                          moto_server.url, "--config", str(config), "--format", "json", "--only", "efa")
    assert result.code == 2, result.stderr
    report = result.json()
    assert report["status"] == "critical"
    by_check = {f["check"]: f for f in report["findings"]}
    assert by_check["efa-sg-self-reference"]["resource"] == world.facts["groups"]["demo-efa"]
    assert by_check["efa-subnet-spread"]["resource"] == world.facts["subnets"]["private-b"]
    assert by_check["efa-not-attached"]["resource"] == world.facts["nodes"]["gpu-node-5"]
    assert by_check["efa-missing-interfaces"]["resource"] == world.facts["nodes"]["gpu-node-4"]
    assert by_check["placement-group"]["resource"] == world.facts["nodes"]["gpu-node-6"]
    assert by_check["efa-errors"]["resource"] == world.facts["nodes"]["gpu-node-1"]
    assert by_check["efa-errors"]["evidence"]["interfaces"][0]["eni"] == world.facts["gpu"]["sick_efa"]
    # Not verified, never called healthy: gpu-node-6's CloudWatch agent is down (a planted fault), so efa-errors
    # cannot read its EFA counters; and the HyperPod cluster the config names has EFA nodes whose counters no
    # source here sees (this config names no Prometheus).
    errors = {(e["code"], e["check"]): e for e in report["errors"]}
    assert set(errors) == {("NoMetrics", "efa-errors"), ("NoMetricSource", "efa-errors")}
    assert world.facts["nodes"]["gpu-node-6"] in errors[("NoMetrics", "efa-errors")]["unverified"]
    assert "metrics.url" in errors[("NoMetricSource", "efa-errors")]["message"]
    # Seven nodes and 133 interfaces, and still one call per describe (plus the HyperPod nodes' instance type).
    calls = report["stats"]["api_calls"]
    assert {k: v for k, v in calls.items() if k.startswith("ec2.")} == {**EXPECTED_CALLS,
                                                                        "ec2.DescribeInstanceTypes": 2}
    # The EFA checks read no SageMaker endpoint; the HyperPod cluster is listed once.
    assert not [k for k in calls if k.startswith(("sagemaker.ListEndpoints", "resourcegroupstaggingapi."))]
    assert calls["sagemaker.ListClusterNodes"] == 1


def test_healthy_cluster_exits_0(moto_server, fmdoctor_cli):
    b = ClusterBuilder(moto_server.session().client("ec2"), "healthy")
    b.vpc()
    b.subnet("a", "10.0.0.0/20", "us-west-2a")
    b.security_group("efa", self_ingress=True, self_egress=True)
    b.placement_group("pg")
    b.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "a", ["efa"], efa_interfaces=4, placement_group="pg")
    result = fmdoctor_cli("check", "--cluster", "healthy", "--region", "us-west-2", "--endpoint-url",
                          moto_server.url, "--format", "json", "--only", "efa")
    assert result.code == 0, result.stderr
    assert result.json()["status"] == "ok" and result.json()["findings"] == []


def test_endpoint_from_environment(moto_server, fmdoctor_cli):
    seed_demo(moto_server.session())
    result = fmdoctor_cli("check", "--cluster", DEMO_CLUSTER, "--format", "json", "--only", "efa-not-attached",
                          env={"AWS_ENDPOINT_URL": moto_server.url, "AWS_REGION": "us-west-2"})
    assert result.code == 2 and [f["check"] for f in result.json()["findings"]] == ["efa-not-attached"]


def test_unknown_cluster_exits_3_with_one_message(moto_server, fmdoctor_cli):
    result = fmdoctor_cli("check", "--cluster", "nope", "--region", "us-west-2", "--endpoint-url", moto_server.url)
    assert result.code == 3
    assert result.stdout == ""
    assert "no running or pending instances tagged with cluster 'nope'" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_credentials_exits_3(moto_server, fmdoctor_cli):
    result = fmdoctor_cli("check", "--cluster", "x", "--region", "us-west-2", "--endpoint-url", moto_server.url,
                          env={"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
    assert result.code == 3
    assert "credentials" in result.stderr.lower() and "Traceback" not in result.stderr


def test_demo_runs_in_seconds_from_a_bare_environment(fmdoctor_cli):
    started = time.monotonic()
    no_keys = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    result = fmdoctor_cli("check", "--demo", "--format", "json", env=no_keys)
    assert result.code == 2, result.stderr
    assert result.json()["cluster"] == DEMO_CLUSTER
    # Generous bound for a loaded 2-core CI box; the demo itself takes about two seconds.
    assert time.monotonic() - started < 60
