"""GPU metrics as real setups publish them: Slurm hostnames, Container Insights beside the agent, and the power,
clock and tensor signals a straggler verdict can use.

Series are what the CloudWatch agent's nvidia_smi input publishes (aws/amazon-cloudwatch-agent
plugins/inputs/nvidia_smi/schema_v12/parser.go: fields utilization_gpu, memory_used/_total, power_draw,
clocks_current_sm; tags index, name, arch, host, with uuid/pstate/compute_mode on the deny list of
translator/translate/metrics/config/deny_list_tags.go) and what Container Insights publishes
(translator/translate/otel/exporter/awsemf/kubernetes.go: node_gpu_* with ClusterName, NodeName, InstanceId,
InstanceType, GpuDevice). ParallelCluster names Slurm nodes ``{queue}-{st|dy}-{compute resource}-{n}``
(aws/aws-parallelcluster-node src/slurm_plugin/instance_manager.py, _parse_requested_instances) and tags its
compute instances parallelcluster:queue-name, parallelcluster:compute-resource-name, parallelcluster:node-type.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from fmdoctor.demo.metrics import MetricsPublisher, launch_nodes

SETTLED = {"gpu": {"startup_grace": "0s"}}
PCLUSTER_TAGS = {"parallelcluster:queue-name": "train", "parallelcluster:compute-resource-name": "p5",
                 "parallelcluster:node-type": "Compute"}


@pytest.fixture
def publish(aws):
    return MetricsPublisher(aws.client("cloudwatch"), datetime.now(UTC))


def slurm_nodes(builder, count, hostname_tag: str | None):
    builder.security_group("nodes", self_ingress=True, self_egress=True)
    names = [f"train-st-p5-{i}" for i in range(1, count + 1)]
    for name in names:
        tags = {**PCLUSTER_TAGS, **({hostname_tag: name} if hostname_tag else {})}
        builder.launch([f"Compute-{name}"], "p5.48xlarge", "private-a", ["nodes"], extra_tags=tags)
    # Each node under its Slurm name, the host the agent reports it as.
    return names, [dataclasses.replace(builder.launched[f"Compute-{name}"], name=name) for name in names]


def test_slurm_hostnames_are_matched_through_a_hostname_tag(builder, publish, run_checks):
    names, nodes = slurm_nodes(builder, 3, hostname_tag="slurm:hostname")
    for node, utilization in zip(nodes, [95.0, 96.0, 2.0], strict=True):
        publish.gpu_node(node.id, node.private_ip, utilization, append_instance_id=False, host=node.name)
    publish.flush()

    report = run_checks(["gpu-metrics-missing", "gpu-idle"],
                        gpu={"startup_grace": "0s", "hostname_tags": ["slurm:hostname"]})

    assert [(f.check, f.resource) for f in report.findings] == [("gpu-idle", nodes[2].id)]
    assert report.errors == []


def test_slurm_hostnames_without_a_mapping_are_found_but_not_matched(builder, publish, run_checks):
    names, nodes = slurm_nodes(builder, 2, hostname_tag=None)
    for node in nodes:
        publish.gpu_node(node.id, node.private_ip, 95.0, append_instance_id=False, host=node.name)
    publish.flush()

    report = run_checks(["gpu-metrics-missing", "gpu-idle"], **SETTLED)

    missing = report.findings_for("gpu-metrics-missing")
    assert {f.resource for f in missing} == {n.id for n in nodes}
    for finding in missing:
        assert finding.evidence["problem"] == "not-matched"
        assert f"metrics found but not matched to {finding.resource}" in finding.summary
        assert sorted(finding.evidence["unmatched_series"]) == [f"host={n}" for n in sorted(names)]
        assert "agent is not" not in finding.summary  # the agent runs; fmdoctor could not tell whose series
    # gpu-idle cannot judge them and says so; it does not call them healthy.
    [error] = [e for e in report.errors if e.check == "gpu-idle"]
    assert error.code == "NoMetrics" and all(n.id in error.unverified for n in nodes)


def test_a_node_publishing_only_container_insights_is_judged_under_default_settings(builder, publish, run_checks):
    """An EKS node with Container Insights' node_gpu_* and no CWAgent series: looked for under Container Insights'
    names (its utilization listed once), judged there, never reported as an agent that is not running."""
    nodes = launch_nodes(builder, 4)
    for node in nodes[:3]:
        publish.gpu_node(node.id, node.private_ip, 95.0)
    publish.container_insights_node(nodes[3].id, nodes[3].private_ip, 2.0, memory_percent=1.0)
    publish.flush()

    report = run_checks(["gpu-metrics-missing", "gpu-idle", "gpu-straggler"], **SETTLED)

    assert [(f.check, f.resource) for f in report.findings] == [("gpu-idle", nodes[3].id)]
    [idle] = report.findings
    assert (idle.evidence["namespace"], idle.evidence["metric"]) == ("ContainerInsights", "node_gpu_utilization")
    assert idle.evidence["devices_reporting"] == 8 and report.errors == []
    # 5 CWAgent names, then Container Insights' utilization, then its 3 other names for the node found there.
    assert report.stats.api_calls["cloudwatch.ListMetrics"] == 9
    assert report.stats.api_calls["cloudwatch.GetMetricData"] == 1


def test_a_node_held_back_by_its_network_is_a_power_straggler(builder, publish, run_checks):
    """NCCL waits are kernels: the node waiting on a thin network path shows the same utilization as its peers,
    but its GPUs draw far less power. Utilization alone would pass it."""
    nodes = launch_nodes(builder, 5)
    for node in nodes[:4]:
        publish.gpu_node(node.id, node.private_ip, 96.0)
    publish.gpu_node(nodes[4].id, nodes[4].private_ip, 96.0, power_w=330.0)
    publish.flush()

    [finding] = run_checks(["gpu-straggler"], **SETTLED).findings

    assert finding.resource == nodes[4].id and finding.evidence["based_on"] == ["power"]
    assert finding.evidence["signals_compared"] == ["utilization", "power", "sm_clock"]
    power = finding.evidence["signals"]["power"]
    assert power["value"] < 0.6 * power["cluster_median"] and power["robust_z"] <= -3.5
    assert finding.evidence["robust_z"] is None  # not a utilization outlier
    assert "Based on power draw" in finding.summary


def test_a_throttled_gpu_is_a_clock_straggler_and_equal_clocks_are_not(builder, publish, run_checks):
    nodes = launch_nodes(builder, 4)
    for node in nodes[:3]:
        publish.gpu_node(node.id, node.private_ip, 95.0, power_w=610.0)
    publish.gpu_node(nodes[3].id, nodes[3].private_ip, 95.0, power_w=610.0, sm_clock_mhz=1275.0)
    publish.flush()

    [finding] = run_checks(["gpu-straggler"], **SETTLED).findings

    assert finding.resource == nodes[3].id and finding.evidence["based_on"] == ["sm_clock"]
    assert finding.evidence["signals"]["sm_clock"]["cluster_median"] == 1980.0
