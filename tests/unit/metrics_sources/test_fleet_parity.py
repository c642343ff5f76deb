"""An inference fleet's GPU load told to CloudWatch and to a real Prometheus: accelerator-saturation and
inference-idle give the same verdicts from either (and through AMP's SigV4-signed API), and the evidence says
which source answered.

CloudWatch gets the CloudWatch agent's nvidia_gpu series (:class:`fmdoctor.demo.metrics.MetricsPublisher`);
Prometheus the DCGM exporter's, scraped as an ec2_sd_configs job labels them (``instance="<ip>:9400"``,
``instance_id``), written by :class:`fmdoctor.demo.openmetrics.OpenMetricsWriter` from the same per-period values.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.demo.metrics import MetricsPublisher
from fmdoctor.demo.moto_health import backdate_launch
from fmdoctor.demo.openmetrics import OpenMetricsWriter
from fmdoctor.runbooks.library import get_runbook
from fmdoctor.runbooks.render import render_runbook

LOAD = ["accelerator-saturation", "inference-idle"]
A10G = ("NVIDIA A10G", 22888.0)
STORY = {"busy": 95.0, "calm": [92.0, 10.0, 10.0, 10.0], "quiet": 0.5}  # per node, per GPU when a list


def _fleet(builder, aws, only_prometheus: frozenset[str] = frozenset()):
    """The STORY fleet; nodes named in ``only_prometheus`` publish to Prometheus alone (no CloudWatch agent)."""
    builder.security_group("serve")
    builder.launch(list(STORY), "g5.12xlarge", "private-a", ["serve"], role="inference")
    nodes = [builder.launched[name] for name in STORY]
    now = datetime.now(UTC)
    cloudwatch = MetricsPublisher(aws.client("cloudwatch"), now)
    history = OpenMetricsWriter(now)
    for (name, utilization), node in zip(STORY.items(), nodes, strict=True):
        backdate_launch(aws, "us-west-2", node.id, now - timedelta(hours=2))  # served the whole window
        if name not in only_prometheus:
            cloudwatch.gpu_node(node.id, node.private_ip, utilization, gpus=4, gpu=A10G, instance_type="g5.12xlarge")
        history.dcgm_node({"Hostname": f"ip-{node.private_ip.replace('.', '-')}", "instance": f"{node.private_ip}:9400",
                           "job": "dcgm_exporter", "instance_id": node.id}, utilization, gpus=4, gpu=A10G)
    cloudwatch.flush()
    return {name: node.id for name, node in zip(STORY, nodes, strict=True)}, history.text()


@pytest.fixture
def fleet(builder, aws):
    return _fleet(builder, aws)


def test_fleet_gpu_load_from_prometheus_matches_cloudwatch(fleet, aws, prometheus, amp, run_checks):
    ids, history = fleet
    url = prometheus(history)
    workspace, seen = amp(url, credentials=aws.get_credentials().get_frozen_credentials())

    from_cloudwatch = run_checks(LOAD, metrics={"source": "cloudwatch"})
    from_prometheus = run_checks(LOAD, metrics={"source": "prometheus", "url": url})
    from_amp = run_checks(LOAD, metrics={"source": "prometheus", "url": workspace, "auth": "sigv4"})

    expected = {("accelerator-saturation", ids["busy"]), ("inference-idle", ids["quiet"])}
    for report in (from_cloudwatch, from_prometheus, from_amp):
        assert {(f.check, f.resource) for f in report.findings} == expected
        assert report.errors == []
    saturated = {f.check: f for f in from_prometheus.findings}["accelerator-saturation"].evidence
    assert saturated["utilization_percent"] == pytest.approx(95, abs=2)
    assert (saturated["source"], saturated["prometheus_url"]) == ("prometheus", url)
    idle = {f.check: f for f in from_prometheus.findings}["inference-idle"].evidence
    assert idle["max_utilization_percent"] <= 1.0 and idle["prometheus_url"] == url
    assert "source" not in {f.check: f for f in from_cloudwatch.findings}["inference-idle"].evidence
    # Their runbooks query that Prometheus, where the CloudWatch-sourced ones query CloudWatch.
    for finding in from_prometheus.findings:
        page = render_runbook(get_runbook(finding.runbook), finding, "test-cluster", "us-west-2")
        assert f"curl -s {url}api/v1/query_range --data-urlencode 'query=" in page and "DCGM_FI_DEV_GPU_UTIL" in page
        assert "CWAgent" not in page
    idle_page = render_runbook(get_runbook("inference-idle"), {f.check: f for f in from_cloudwatch.findings}[
        "inference-idle"], "test-cluster", "us-west-2")
    assert "--namespace CWAgent" in idle_page and "curl" not in idle_page
    # One query per metric and statistic for the whole fleet (mean and peak utilization, memory used and free),
    # and no CloudWatch listing when Prometheus is the source.
    assert from_prometheus.stats.queries == {"prometheus.query_range": 4}
    assert "cloudwatch.ListMetrics" not in from_prometheus.stats.api_calls
    assert {k: v for k, v in from_amp.stats.api_calls.items() if k.startswith("aps.")} == {"aps.QueryMetrics": 4}
    assert seen.rejected == [] and len(seen.verified) == 4
    assert from_cloudwatch.stats.queries == {}


def test_auto_reads_prometheus_only_for_the_fleet_nodes_cloudwatch_lacks(fleet, prometheus, run_checks):
    ids, history = fleet
    url = prometheus(history)
    report = run_checks(LOAD, metrics={"url": url})  # source: auto
    assert {(f.check, f.resource) for f in report.findings} == {("accelerator-saturation", ids["busy"]),
                                                                ("inference-idle", ids["quiet"])}
    assert report.stats.queries == {}  # CloudWatch had every node's series
    assert all("source" not in f.evidence for f in report.findings)


def test_auto_reads_the_fleet_nodes_cloudwatch_lacks_from_prometheus(builder, aws, prometheus, run_checks):
    ids, history = _fleet(builder, aws, only_prometheus=frozenset({"quiet", "busy"}))
    url = prometheus(history)
    report = run_checks(LOAD, metrics={"url": url})  # source: auto
    found = {(f.check, f.resource): f for f in report.findings}
    assert set(found) == {("accelerator-saturation", ids["busy"]), ("inference-idle", ids["quiet"])}
    assert all(f.evidence["prometheus_url"] == url for f in found.values()) and report.errors == []
    assert report.stats.queries == {"prometheus.query_range": 4}
