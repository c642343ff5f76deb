"""The GPU and EFA-counter checks as users run them: the CLI over HTTP against moto's server, the demo seeded."""

from __future__ import annotations

import json

import pytest

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo

pytestmark = pytest.mark.e2e


def test_gpu_checks_over_http_find_the_planted_faults(moto_server, fmdoctor_cli, tmp_path):
    world = seed_demo(moto_server.session())
    config = tmp_path / "fmdoctor.yaml"
    config.write_text(json.dumps({"clusters": {DEMO_CLUSTER: world.settings}}))  # JSON is YAML
    result = fmdoctor_cli("check", "--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url",
                          moto_server.url, "--config", str(config), "--format", "json", "--only", "gpu,efa-errors")
    assert result.code == 2, result.stderr
    report = result.json()
    nodes, gpu = world.facts["nodes"], world.facts["gpu"]
    found = {(f["check"], f["resource"]) for f in report["findings"]}
    assert found == {
        ("gpu-idle", nodes[gpu["idle"]]),
        ("gpu-straggler", nodes[gpu["straggler"]]),
        ("gpu-memory-pressure", nodes[gpu["memory_pressure"]]),
        ("gpu-metrics-missing", nodes[gpu["no_metrics"]]),
        ("efa-errors", nodes["gpu-node-1"]),
    }
    [efa] = [f for f in report["findings"] if f["check"] == "efa-errors"]
    assert efa["severity"] == "critical" and efa["evidence"]["interfaces"][0]["eni"] == gpu["sick_efa"]
    # 5 GPU + 4 EFA metric names listed, and Container Insights' utilization for the node without series; five
    # GPU nodes x 8 GPUs x 5 metrics + 100 EFA interfaces x 4 counters = 600 queries: 2 calls.
    calls = report["stats"]["api_calls"]
    assert calls["cloudwatch.ListMetrics"] == 10 and calls["cloudwatch.GetMetricData"] == 2
    [memory] = [f for f in report["findings"] if f["check"] == "gpu-memory-pressure"]
    assert memory["evidence"]["basis"] == ["steady-growth"] and memory["evidence"]["devices"][0]["device"] == "5"
    # The agent-down node is reported as not verified by the other checks, never as healthy; so are the HyperPod
    # cluster's nodes, whose GPUs no source here sees (this config names no Prometheus); and Xids, which
    # CloudWatch does not carry.
    errors = {(e["check"], e["code"]) for e in report["errors"]}
    judging = {"gpu-idle", "gpu-straggler", "gpu-memory-pressure", "gpu-xid-metrics"}
    assert errors == ({(c, "NoMetrics") for c in [*judging, "efa-errors"]}
                      | {(c, "NoMetricSource") for c in [*judging, "gpu-metrics-missing", "efa-errors"]}
                      | {("gpu-xid-metrics", "NoXidMetric")})
