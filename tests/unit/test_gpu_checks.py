"""GPU utilization checks against moto's CloudWatch: each id failing and healthy, call counts, gaps, Neuron.

Series are published as the CloudWatch agent publishes them (aws/amazon-cloudwatch-agent
plugins/inputs/nvidia_smi: measurement nvidia_smi_<field>, dimensions index, name, arch, host; InstanceId and
InstanceType only with append_dimensions) and as Container Insights does (translator/translate/otel/exporter/
awsemf/kubernetes.go: node_gpu_* per GpuDevice, per ClusterName/NodeName/InstanceId and per ClusterName), by
:class:`fmdoctor.demo.metrics.MetricsPublisher`.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fmdoctor.demo.metrics import A100_40GB, MetricsPublisher, launch_nodes
from fmdoctor.engine.model import Status

GPU_IDS = ["gpu-metrics-missing", "gpu-idle", "gpu-straggler", "gpu-memory-pressure"]
SETTLED = {"gpu": {"startup_grace": "0s"}}  # moto's instances were launched a moment ago


@pytest.fixture
def publish(aws):
    return MetricsPublisher(aws.client("cloudwatch"), datetime.now(UTC))


def busy(publish, nodes, utilization=95.0, **kwargs):
    for node in nodes:
        publish.gpu_node(node.id, node.private_ip, utilization, **kwargs)


def test_healthy_gpu_cluster_passes_with_one_listing_per_metric_and_one_fetch(builder, publish, run_checks):
    nodes = launch_nodes(builder, 4)
    for node, utilization in zip(nodes, [95.0, 93.0, 97.0, 94.0], strict=True):
        publish.gpu_node(node.id, node.private_ip, utilization, memory_percent=88.0)
    publish.flush()

    report = run_checks(GPU_IDS, **SETTLED)

    assert report.findings == [] and report.errors == []
    assert report.status is Status.OK and report.stats.checks_run == GPU_IDS
    calls = report.stats.api_calls
    # 5 metric names (utilization, memory used/total, power, SM clock) listed once each; 4 nodes x 8 GPUs x 5
    # metrics = 160 queries in one GetMetricData. Every node publishes, so no other publisher is looked at.
    assert calls["cloudwatch.ListMetrics"] == 5 and calls["cloudwatch.GetMetricData"] == 1


def test_idle_node_is_found_and_busy_ones_are_not(builder, publish, run_checks):
    nodes = launch_nodes(builder, 4)
    busy(publish, nodes[:3])
    publish.gpu_node(nodes[3].id, nodes[3].private_ip, 3.0, memory_percent=1.0)
    publish.flush()

    report = run_checks(["gpu-idle", "gpu-straggler"], **SETTLED)

    [idle] = report.findings
    assert (idle.check, idle.resource) == ("gpu-idle", nodes[3].id)
    assert idle.evidence["utilization_percent"] < 10 and idle.evidence["idle_percent"] == 10.0
    assert idle.evidence["devices_reporting"] == 8 and idle.evidence["datapoints"] == 6
    assert "gpu-4" in idle.summary and "8 GPUs" in idle.summary
    # The idle node is gpu-idle's finding, not a straggler among the busy ones.
    assert report.findings_for("gpu-straggler") == []


def test_all_idle_cluster_reports_every_node_and_leaves_straggler_undecided(builder, publish, run_checks):
    nodes = launch_nodes(builder, 3)
    busy(publish, nodes, utilization=1.0, memory_percent=0.5)
    publish.flush()

    report = run_checks(["gpu-idle", "gpu-straggler"], **SETTLED)

    assert {f.resource for f in report.findings_for("gpu-idle")} == {n.id for n in nodes}
    [skipped] = report.skipped
    assert skipped.check == "gpu-straggler" and "at least 3 busy nodes" in skipped.reason


def test_straggler_well_below_the_median_is_found(builder, publish, run_checks):
    nodes = launch_nodes(builder, 5)
    for node, utilization in zip(nodes, [96.0, 94.0, 60.0, 95.0, 93.0], strict=True):
        publish.gpu_node(node.id, node.private_ip, utilization)
    publish.flush()

    [finding] = run_checks(["gpu-straggler"], **SETTLED).findings

    assert finding.resource == nodes[2].id
    assert finding.evidence["cluster_median_percent"] == pytest.approx(94, abs=1.5)
    assert finding.evidence["gap_points"] >= 30 and finding.evidence["robust_z"] <= -3.5
    assert finding.evidence["nodes_compared"] == 5


@pytest.mark.parametrize(
    "utilizations",
    [[91.0, 97.0, 84.0, 89.0, 96.0], [96.0, 95.0, 96.0, 84.0, 95.0]],
    ids=["natural-spread", "tight-cluster-small-gap"],
)
def test_no_straggler_in_a_normal_spread_or_below_the_minimum_gap(builder, publish, run_checks, utilizations):
    # The second case is far below the others in MAD units (robust z about -7) but only ~11 points
    # below the median: under the 15-point minimum gap, so not a straggler.
    nodes = launch_nodes(builder, 5)
    for node, utilization in zip(nodes, utilizations, strict=True):
        publish.gpu_node(node.id, node.private_ip, utilization)
    publish.flush()
    report = run_checks(["gpu-straggler"], **SETTLED)
    assert report.findings == [] and report.status is Status.OK


@pytest.mark.parametrize("count", [1, 2])
def test_straggler_needs_three_busy_nodes(builder, publish, run_checks, count):
    nodes = launch_nodes(builder, count)
    for node, utilization in zip(nodes, [95.0, 40.0], strict=False):
        publish.gpu_node(node.id, node.private_ip, utilization)
    publish.flush()
    report = run_checks(["gpu-straggler"], **SETTLED)
    assert report.findings == []
    assert report.skipped[0].reason.endswith(f"found {count}")


def test_full_memory_on_a_busy_job_is_not_memory_pressure(builder, publish, run_checks):
    """98.5% of memory held steadily while the GPUs stay busy: the caching allocator of a healthy large job, or
    an LLM server that pre-allocates (vLLM gpu_memory_utilization). Never reported on its own."""
    nodes = launch_nodes(builder, 3)
    memory = [90.0] * 8
    memory[6] = 98.5
    publish.gpu_node(nodes[0].id, nodes[0].private_ip, 95.0, memory_percent=memory)
    busy(publish, nodes[1:], memory_percent=97.0)
    publish.flush()
    report = run_checks(["gpu-memory-pressure"], **SETTLED)
    assert report.findings == [] and report.errors == [] and report.status is Status.OK


def test_memory_at_the_ceiling_with_collapsing_utilization_is_reported(builder, publish, run_checks):
    nodes = launch_nodes(builder, 3)
    trend = {6: {"utilization": [95, 95, 94, 95, 30, 25], "memory_percent": [92, 93, 95, 97, 99, 99]}}
    publish.gpu_node(nodes[0].id, nodes[0].private_ip, 95.0, memory_percent=90.0, by_period=trend)
    busy(publish, nodes[1:], memory_percent=90.0)
    publish.flush()

    [finding] = run_checks(["gpu-memory-pressure"], **SETTLED).findings

    assert finding.resource == nodes[0].id and finding.evidence["basis"] == ["ceiling-and-collapse"]
    [device] = finding.evidence["devices"]
    assert device["device"] == "6" and device["peak_memory_recent_percent"] >= 95
    assert device["utilization_before_percent"] > 90 and device["utilization_recent_percent"] < 35
    assert finding.evidence["devices_measured"] == 8
    assert "Based on memory at the ceiling together with falling utilization" in finding.summary


def test_steadily_growing_memory_is_reported_and_a_job_start_is_not(builder, publish, run_checks):
    nodes = launch_nodes(builder, 3)
    leak = {2: {"memory_percent": [70, 73, 76, 79, 82, 85]}}
    start = {g: {"memory_percent": [0, 78, 80, 80, 80, 80]} for g in range(8)}  # a job started in the window
    publish.gpu_node(nodes[0].id, nodes[0].private_ip, 95.0, memory_percent=70.0, by_period=leak)
    publish.gpu_node(nodes[1].id, nodes[1].private_ip, 95.0, by_period=start)
    busy(publish, nodes[2:])
    publish.flush()

    [finding] = run_checks(["gpu-memory-pressure"], **SETTLED).findings

    assert finding.resource == nodes[0].id and finding.evidence["basis"] == ["steady-growth"]
    [device] = finding.evidence["devices"]
    assert device["device"] == "2" and device["rise_points"] >= 14 and device["periods_to_full"] > 0
    assert "Based on steady memory growth" in finding.summary


def test_node_without_agent_is_reported_and_not_called_healthy(builder, publish, run_checks):
    nodes = launch_nodes(builder, 4)
    busy(publish, nodes[:3])
    publish.flush()

    report = run_checks(GPU_IDS, **SETTLED)

    [missing] = report.findings
    assert (missing.check, missing.resource) == ("gpu-metrics-missing", nodes[3].id)
    assert missing.evidence["problem"] == "no-series" and missing.evidence["devices_reporting"] == 0
    assert missing.evidence["not_verified"] == ["gpu-idle", "gpu-straggler", "gpu-memory-pressure"]
    # The other GPU checks say they could not judge that node, rather than passing it.
    unverified = {e.check: e for e in report.errors}
    assert set(unverified) == {"gpu-idle", "gpu-straggler", "gpu-memory-pressure"}
    assert all(e.code == "NoMetrics" and nodes[3].id in e.unverified for e in unverified.values())
    assert report.status is Status.WARNING


def test_sparse_and_partial_metrics(builder, publish, run_checks):
    nodes = launch_nodes(builder, 4)
    busy(publish, nodes[:2])
    publish.gpu_node(nodes[2].id, nodes[2].private_ip, 95.0, present=[5])  # 1 of 6 periods: agent stopped
    publish.gpu_node(nodes[3].id, nodes[3].private_ip, 95.0, indices=[0, 1, 2, 3, 4, 6, 7])  # GPU 5 gone
    publish.flush()

    findings = {f.resource: f for f in run_checks(["gpu-metrics-missing"], **SETTLED).findings}

    assert set(findings) == {nodes[2].id, nodes[3].id}
    sparse, partial = findings[nodes[2].id].evidence, findings[nodes[3].id].evidence
    assert sparse["problem"] == "sparse" and (sparse["datapoints"], sparse["periods"]) == (1, 6)
    assert partial["problem"] == "devices-missing" and partial["missing_devices"] == ["5"]
    assert partial["devices_reporting"] == 7 and partial["not_verified"] == []


def test_gaps_are_not_zeros(builder, publish, run_checks):
    """A busy node that missed two periods is still judged on the periods it has, and is not idle."""
    nodes = launch_nodes(builder, 3)
    busy(publish, nodes[:2])
    publish.gpu_node(nodes[2].id, nodes[2].private_ip, 95.0, present=[0, 2, 3, 5])
    publish.flush()
    report = run_checks(GPU_IDS, **SETTLED)
    assert report.findings == [] and report.errors == []


def test_agent_without_instance_dimension_is_found_by_hostname(builder, publish, run_checks):
    nodes = launch_nodes(builder, 3)
    busy(publish, nodes[:2])
    publish.gpu_node(nodes[2].id, nodes[2].private_ip, 2.0, gpu=A100_40GB, append_instance_id=False)
    publish.flush()
    report = run_checks(["gpu-metrics-missing", "gpu-idle"], **SETTLED)
    assert [(f.check, f.resource) for f in report.findings] == [("gpu-idle", nodes[2].id)]


def test_series_of_other_clusters_and_stale_dimension_sets_are_ignored(builder, publish, run_checks):
    nodes = launch_nodes(builder, 3)
    busy(publish, nodes)
    publish.gpu_node("i-0000000000000abcd", "10.9.9.9", 1.0)  # another cluster's idle node
    # An aggregate per-instance series besides the per-GPU ones must not count as a ninth GPU.
    publish._add("CWAgent", "nvidia_smi_utilization_gpu", {"InstanceId": nodes[0].id}, 95.0, 0, "Percent")
    publish.flush()
    report = run_checks(GPU_IDS, **SETTLED)
    assert report.findings == [] and report.errors == []


def test_neuron_nodes_use_neuron_metrics_and_are_compared_among_themselves(builder, publish, run_checks):
    gpus = launch_nodes(builder, 3)
    trn = launch_nodes(builder, 4, "trn1.32xlarge", prefix="trn")
    busy(publish, gpus, utilization=40.0)  # a different job on the GPUs: not compared with the Trainium nodes
    for node, utilization in zip(trn, [88.0, 90.0, 89.0, 4.0], strict=True):
        publish.neuron_node(node.id, utilization)
    publish.flush()

    report = run_checks(GPU_IDS, **SETTLED)

    assert [(f.check, f.resource) for f in report.findings] == [("gpu-idle", trn[3].id)]
    assert report.findings[0].evidence["accelerator"] == "neuron"
    assert report.findings[0].evidence["devices_reporting"] == 32  # NeuronCores of a trn1.32xlarge
    assert report.stats.api_calls["cloudwatch.GetMetricData"] == 1


def test_neuron_node_without_neuron_monitor_is_missing(builder, publish, run_checks):
    [trn] = launch_nodes(builder, 1, "trn1.32xlarge", prefix="trn")
    publish.gpu_node(trn.id, trn.private_ip, 90.0)  # NVIDIA-named metrics mean nothing on Trainium
    publish.flush()
    report = run_checks(["gpu-metrics-missing", "gpu-memory-pressure"], **SETTLED)
    [finding] = report.findings
    assert (finding.evidence["namespace"], finding.evidence["metric"]) == ("NeuronMonitor", "neuroncore_utilization")
    assert finding.evidence["expected_devices"] == 32
    assert [s.check for s in report.skipped] == []  # memory pressure: the node has no usable metrics at all


def test_recently_launched_nodes_are_not_judged(builder, run_checks):
    launch_nodes(builder, 2)
    report = run_checks(GPU_IDS)  # default 15-minute grace; moto launched them just now
    assert report.findings == [] and {s.check for s in report.skipped} == set(GPU_IDS)
    assert "launched less than 15m ago" in report.skipped[0].reason
    # Nothing fetched; the only CloudWatch calls are the listings a run begins before its inventory shows whether
    # any node will be judged (fmdoctor.metrics.nodes.start_listings): one page for each configured GPU metric name.
    assert report.stats.api_calls.get("cloudwatch.GetMetricData") is None
    assert report.stats.api_calls.get("cloudwatch.ListMetrics") == 5


def test_no_gpu_nodes_is_not_applicable(builder, run_checks):
    builder.security_group("plain")
    builder.launch(["web-1"], "m5.large", "private-a", ["plain"])
    report = run_checks(GPU_IDS, **SETTLED)
    assert {s.check for s in report.skipped} == set(GPU_IDS) and report.status is Status.UNKNOWN


@pytest.mark.parametrize("operation", ["ListMetrics", "GetMetricData"])
def test_denied_cloudwatch_is_an_error_entry_never_healthy(builder, publish, faults, run_with_faults, operation):
    nodes = launch_nodes(builder, 3)
    busy(publish, nodes)
    publish.flush()
    faults.deny("cloudwatch", operation)

    report = run_with_faults(GPU_IDS, **SETTLED)

    assert report.findings == []
    assert {e.check for e in report.errors} == set(GPU_IDS)
    assert {(e.code, e.iam_action) for e in report.errors} == {("AccessDenied", f"cloudwatch:{operation}")}
    # Fetched (and failed) once for all four checks, not once per check: the memoised failure is shared.
    # (The five metric names are listed concurrently; listings not yet started when one fails are cancelled.)
    injected = faults.injected[f"cloudwatch.{operation}"]
    assert injected == 1 if operation == "GetMetricData" else 1 <= injected <= 5
    assert report.status is Status.UNKNOWN


CONTAINER_INSIGHTS = {"namespace": "ContainerInsights", "utilization_metric": "node_gpu_utilization",
                      "memory_used_metric": "node_gpu_memory_used", "memory_total_metric": "node_gpu_memory_total",
                      "device_dimensions": ["GpuDevice"]}


def test_container_insights_metrics_find_the_idle_node_and_pass_the_busy_ones(builder, publish, run_checks):
    """Container Insights publishes node_gpu_* per GPU (GpuDevice), per node and per cluster, memory in bytes:
    the per-GPU series are judged, the aggregates neither count as a ninth GPU nor as another node."""
    nodes = launch_nodes(builder, 4)
    for node in nodes[:3]:
        publish.container_insights_node(node.id, node.private_ip, 95.0, memory_percent=85.0)
    publish.container_insights_node(nodes[3].id, nodes[3].private_ip, 2.0, memory_percent=1.0)
    publish.gpu_node(nodes[0].id, nodes[0].private_ip, 1.0)  # CWAgent series are not read under these settings
    publish.flush()

    report = run_checks(GPU_IDS, gpu={**CONTAINER_INSIGHTS, "startup_grace": "0s"})

    assert report.errors == []
    [idle] = report.findings
    assert (idle.check, idle.resource) == ("gpu-idle", nodes[3].id)
    assert (idle.evidence["namespace"], idle.evidence["metric"]) == ("ContainerInsights", "node_gpu_utilization")
    assert idle.evidence["devices_reporting"] == 8 and idle.evidence["utilization_percent"] < 10
    assert idle.evidence["busiest_device"]["device"].startswith("nvidia")
    calls = report.stats.api_calls
    # 4 metric names (utilization, memory used/total, power) listed once each; 4 nodes x 8 GPUs x 4 metrics in
    # one GetMetricData.
    assert calls["cloudwatch.ListMetrics"] == 4 and calls["cloudwatch.GetMetricData"] == 1


def test_container_insights_memory_in_bytes_is_judged_as_a_share(builder, publish, run_checks):
    nodes = launch_nodes(builder, 3)
    publish.container_insights_node(nodes[0].id, nodes[0].private_ip, 95.0, memory_percent=98.0)  # flat: fine
    publish.container_insights_node(nodes[1].id, nodes[1].private_ip, 95.0, memory_percent=85.0)
    publish.container_insights_node(nodes[2].id, nodes[2].private_ip, 95.0,
                                    memory_by_period=[60.0, 64.0, 68.0, 72.0, 76.0, 80.0])
    publish.flush()

    [finding] = run_checks(["gpu-memory-pressure"], gpu={**CONTAINER_INSIGHTS, "startup_grace": "0s"}).findings

    assert finding.resource == nodes[2].id and finding.evidence["devices_measured"] == 8
    assert finding.evidence["basis"] == ["steady-growth"] and len(finding.evidence["devices"]) == 8
    assert all(79 <= d["memory_percent"] <= 81 for d in finding.evidence["devices"])
