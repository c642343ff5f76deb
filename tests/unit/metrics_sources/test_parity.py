"""One cluster story, told to CloudWatch and to a real Prometheus: the GPU and EFA checks give the same verdicts
from either, and through Amazon Managed Service for Prometheus's SigV4-signed API too.

CloudWatch gets what the CloudWatch agent publishes (aws/amazon-cloudwatch-agent plugins/inputs/nvidia_smi;
its efa counters by eniId) through :class:`fmdoctor.demo.metrics.MetricsPublisher`. Prometheus gets what the
DCGM exporter and the EFA exporter publish (NVIDIA/dcgm-exporter etc/default-counters.csv; aws-samples/
awsome-distributed-training 4.validation_and_observability/3.efa-node-exporter), scraped the way that repository's
4.prometheus-grafana/prometheus-agent-collector.yaml scrapes a ParallelCluster (ec2_sd_configs: ``instance`` is
``<private ip>:9400`` or ``:9100``, ``instance_id`` relabelled from the EC2 metadata), written as OpenMetrics by
:class:`fmdoctor.demo.openmetrics.OpenMetricsWriter` and loaded with ``promtool tsdb create-blocks-from
openmetrics``. Both writers take each period's values from :func:`fmdoctor.demo.metrics.gpu_sample`.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fmdoctor.demo.metrics import MetricsPublisher
from fmdoctor.demo.openmetrics import EFA_FAMILIES, OpenMetricsWriter

CHECKS = ["gpu-metrics-missing", "gpu-idle", "gpu-straggler", "gpu-memory-pressure", "efa-errors"]
SETTLED = {"startup_grace": "0s"}
DEVICES = ("rdmap16s27", "rdmap32s27")
LEAK = {5: {"memory_percent": [70.0, 73.0, 76.0, 79.0, 82.0, 85.0]}}
# Per node, the same story for both sources; None publishes nothing anywhere.
STORY = [
    {"utilization": 95.0},
    {"utilization": 96.0},
    {"utilization": 94.0, "by_period": LEAK},  # GPU 5 leaks: gpu-memory-pressure, steady growth
    {"utilization": 2.0, "memory_percent": 0.5},  # drained and billing: gpu-idle
    {"utilization": 60.0},  # a utilization (and power) straggler
    {"utilization": 95.0, "power_w": 330.0},  # busy-looking, but drawing half the power: a power straggler
    None,  # no agent, no exporter: gpu-metrics-missing, not verified elsewhere
]
DROPS = {1: {"rdmap16s27": 12}}  # node 1's first EFA device drops packets: efa-errors, a warning


def verdicts(report) -> set[tuple[str, str, str, str]]:
    def basis(evidence: dict) -> str:
        value = evidence.get("basis") or evidence.get("based_on") or evidence.get("problem") or ""
        return ",".join(value) if isinstance(value, list) else str(value)

    return {(f.check, f.resource, f.severity.value, basis(f.evidence)) for f in report.findings}


@pytest.fixture
def story(builder, aws):
    """Seven p5 nodes with two EFA interfaces each, and what each publishes to CloudWatch and to Prometheus."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    names = [f"gpu-{i}" for i in range(1, len(STORY) + 1)]
    builder.launch(names, "p5.48xlarge", "private-a", ["efa"], efa_interfaces=2)
    nodes = [builder.launched[name] for name in names]
    now = datetime.now(UTC)
    cloudwatch = MetricsPublisher(aws.client("cloudwatch"), now)
    history = OpenMetricsWriter(now)
    for n, (node, told) in enumerate(zip(nodes, STORY, strict=True)):
        if told is None:
            continue
        cloudwatch.gpu_node(node.id, node.private_ip, **told)
        history.dcgm_node({"Hostname": f"ip-{node.private_ip.replace('.', '-')}", "instance": f"{node.private_ip}:9400",
                           "job": "dcgm_exporter", "instance_id": node.id}, **told)
        drops = DROPS.get(n, {})
        for device, eni in zip(DEVICES, node.efa_enis(), strict=True):
            cloudwatch.efa_interface(eni, device, {"efa_rx_dropped": drops.get(device, 0)},
                                     metrics=("efa_rx_dropped",))
        history.efa_node({"instance": f"{node.private_ip}:9100", "job": "efa_node_exporter"}, DEVICES,
                         {d: {"rx_drops": c} for d, c in drops.items()})
    cloudwatch.flush()
    return nodes, history.text()


def test_cloudwatch_prometheus_and_amp_give_the_same_verdicts(story, aws, prometheus, amp, run_checks):
    nodes, history = story
    url = prometheus(history)
    workspace, seen = amp(url, credentials=aws.get_credentials().get_frozen_credentials())  # the run's own
    gpu = {**SETTLED, "efa_metrics": ["efa_rx_dropped"]}

    from_cloudwatch = run_checks(CHECKS, gpu=gpu, metrics={"source": "cloudwatch"})
    from_prometheus = run_checks(CHECKS, gpu=gpu, metrics={"source": "prometheus", "url": url})
    from_amp = run_checks(CHECKS, gpu=gpu, metrics={"source": "prometheus", "url": workspace, "auth": "sigv4"})

    expected = {
        ("gpu-idle", nodes[3].id, "warning", "utilization"),
        ("gpu-straggler", nodes[4].id, "warning", "utilization,power"),
        ("gpu-straggler", nodes[5].id, "warning", "power"),
        ("gpu-memory-pressure", nodes[2].id, "warning", "steady-growth"),
        ("gpu-metrics-missing", nodes[6].id, "warning", "no-series"),
        ("efa-errors", nodes[1].id, "warning", ""),
    }
    assert verdicts(from_cloudwatch) == expected
    assert verdicts(from_prometheus) == expected
    assert verdicts(from_amp) == expected
    # The node nobody sees is not verified by the others, from either source, and never called healthy.
    for report in (from_cloudwatch, from_prometheus, from_amp):
        assert {(e.check, e.code) for e in report.errors} == {
            ("gpu-idle", "NoMetrics"), ("gpu-straggler", "NoMetrics"), ("gpu-memory-pressure", "NoMetrics"),
            ("efa-errors", "NoMetrics")}
        assert all(nodes[6].id in e.unverified for e in report.errors)
    # Evidence says where each verdict came from.
    [idle] = from_prometheus.findings_for("gpu-idle")
    assert (idle.evidence["source"], idle.evidence["metric"]) == ("prometheus", "DCGM_FI_DEV_GPU_UTIL")
    [efa] = from_prometheus.findings_for("efa-errors")
    assert efa.evidence["interfaces"][0]["device"] == "rdmap16s27" and efa.evidence["totals"]["rx_drops"] >= 12

    # One query_range per metric for the whole cluster, however many nodes: the DCGM fields and EFA counters
    # the history holds, after one label-values call that says which exist.
    metrics_held = 7 + len(EFA_FAMILIES)
    assert from_prometheus.stats.queries == {"prometheus.label_values": 1, "prometheus.query_range": metrics_held}
    assert not any(k.startswith("aps.") for k in from_prometheus.stats.api_calls)
    assert {k: v for k, v in from_amp.stats.api_calls.items() if k.startswith("aps.")} == {
        "aps.GetLabels": 1, "aps.QueryMetrics": metrics_held}
    assert from_amp.stats.queries == {}
    # Every AMP request carried a valid SigV4 signature for service aps (checked by botocore's signer).
    assert seen.rejected == [] and len(seen.verified) == metrics_held + 1
    assert from_cloudwatch.stats.queries == {} and "cloudwatch.GetMetricData" in from_cloudwatch.stats.api_calls
