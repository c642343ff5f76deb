"""SageMaker HyperPod clusters through the Prometheus source: nodes listed with ListClusterNodes (moto), their DCGM
and EFA exporter series in a real Prometheus, and "not verified" (never "not applicable") where no source sees
them.

HyperPod's EKS nodes are named ``hyperpod-<instance id>`` (the Kubernetes node name, which the DCGM exporter's
Hostname carries there); its Slurm nodes' hostnames are ListClusterNodes' PrivateDnsHostname
(``ip-10-1-201-66``, as in a HyperPod capture: ``DCGM_FI_DEV_MEMORY_TEMP{..., Hostname="ip-10-1-201-66",
instance="localhost:9400", job="dcgm_exporter", ...}``), and an exporter scraped by an agent on the node itself
is ``instance="localhost:9109"``, which names no node. Series are written by
:class:`fmdoctor.demo.openmetrics.OpenMetricsWriter` (DCGM fields and labels per NVIDIA/dcgm-exporter's
README and etc/default-counters.csv; DCGM_FI_DEV_XID_ERRORS is the value of the last Xid).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from fmdoctor.demo.moto_health import set_hyperpod_node_dns
from fmdoctor.demo.openmetrics import OpenMetricsWriter
from fmdoctor.engine.model import Status

HP = "hp-train"
GPU_CHECKS = ["gpu-metrics-missing", "gpu-idle", "gpu-straggler", "gpu-memory-pressure", "gpu-xid-metrics"]
SETTLED = {"gpu": {"startup_grace": "0s"}}


@pytest.fixture
def hyperpod(aws):
    """A HyperPod cluster of four p5 workers and a controller, as ListClusterNodes reports them."""
    sagemaker = aws.client("sagemaker")
    lifecycle = {"SourceS3Uri": "s3://sagemaker-hp-lifecycle/", "OnCreate": "on_create.sh"}
    role = "arn:aws:iam::123456789012:role/hp-execution"
    sagemaker.create_cluster(ClusterName=HP, InstanceGroups=[
        {"InstanceGroupName": "controller", "InstanceType": "ml.m5.xlarge", "InstanceCount": 1,
         "LifeCycleConfig": lifecycle, "ExecutionRole": role, "ThreadsPerCore": 1},
        {"InstanceGroupName": "workers", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 4,
         "LifeCycleConfig": lifecycle, "ExecutionRole": role, "ThreadsPerCore": 1}])
    workers = [n["InstanceId"] for n in sagemaker.list_cluster_nodes(
        ClusterName=HP, InstanceGroupNameContains="workers")["ClusterNodeSummaries"]]
    for n, node in enumerate(workers):
        set_hyperpod_node_dns(aws, "us-west-2", HP, node, f"ip-10-1-0-{10 + n}.us-west-2.compute.internal")
    return workers


def history(workers: list[str]) -> str:
    writer = OpenMetricsWriter(datetime.now(UTC))
    eks = {"job": "dcgm-exporter", "namespace": "hyperpod-observability"}
    writer.dcgm_node({"Hostname": f"hyperpod-{workers[0]}", **eks}, 95.0, tensor_active=0.45)  # EKS node name
    writer.dcgm_node({"Hostname": "ip-10-1-0-11", "instance": "localhost:9400", "job": "dcgm_exporter"},
                     1.0, memory_percent=0.5, tensor_active=0.0)  # Slurm hostname: idle
    writer.dcgm_node({"Hostname": f"hyperpod-{workers[2]}", **eks}, 96.0, tensor_active=0.0)  # busy, no math
    writer.dcgm_node({"Hostname": "ip-10-1-0-13", "instance": "localhost:9400", "job": "dcgm_exporter"},
                     95.0, tensor_active=0.5, xid={3: (79, 4)}, row_remap_failure={6: 5})
    for n in range(4):  # scraped as localhost by an agent on each node: nothing says which node
        writer.efa_node({"instance": "localhost:9109", "job": f"efa_exporter-{n}"}, ["rdmap16s27"])
    return writer.text()


def test_hyperpod_nodes_are_judged_from_prometheus(hyperpod, prometheus, run_checks):
    url = prometheus(history(hyperpod))

    report = run_checks([*GPU_CHECKS, "efa-errors"], cluster=HP, metrics={"url": url}, **SETTLED)

    found = {(f.check, f.resource): f for f in report.findings}
    assert set(found) == {("gpu-idle", hyperpod[1]), ("gpu-idle", hyperpod[2]), ("gpu-xid-metrics", hyperpod[3])}
    assert found[("gpu-idle", hyperpod[1])].evidence["basis"] == "utilization"
    busy = found[("gpu-idle", hyperpod[2])]
    assert busy.evidence["basis"] == "no-tensor-work" and busy.evidence["utilization_percent"] > 90
    assert busy.evidence["tensor_active_percent"] == 0 and busy.evidence["peers_tensor_active_percent"] >= 40
    xid = found[("gpu-xid-metrics", hyperpod[3])]
    assert xid.severity.value == "critical" and xid.evidence["action"] == "reboot"  # worst first (catalogue order)
    assert [(x["gpu"], x["xid"], x["action"], x["held_from_before_window"]) for x in xid.evidence["xids"]] == [
        ("3", 79, "reboot", False), ("6", 64, "contact-support", False)]
    assert xid.summary.startswith(f"GPU 3 of {HP}/workers ({hyperpod[3]}) reported Xid 79 (GPU has fallen off the bus")
    # The EFA exporter's series say 'localhost': found, but no node can be named, so not verified.
    [efa] = [e for e in report.errors if e.check == "efa-errors"]
    assert efa.code == "NoMetrics" and efa.unverified.startswith("EFA error counters of 4 nodes")
    assert "found but name no node (instance=localhost:9109)" in efa.message
    assert {e.check for e in report.errors} == {"efa-errors"}
    # HyperPod's nodes were listed once; the controller (no GPU) is not judged.
    assert report.stats.api_calls["sagemaker.ListClusterNodes"] == 1
    assert report.stats.queries["prometheus.label_values"] == 1


def test_without_a_source_hyperpod_gpus_are_not_verified_never_not_applicable(hyperpod, run_checks):
    report = run_checks([*GPU_CHECKS, "efa-errors"], cluster=HP, **SETTLED)

    assert report.findings == [] and report.skipped == []
    assert {e.check for e in report.errors} == {*GPU_CHECKS, "efa-errors"}
    assert {e.code for e in report.errors} == {"NoMetricSource"}
    error = report.errors[0]
    assert "of 4 nodes no metric source sees" in error.unverified
    assert "metrics.url" in error.message and "Slurm-orchestrated" in error.message
    assert report.status is Status.UNKNOWN  # nothing was verified


def test_a_hyperpod_node_dropping_efa_packets_is_named_by_its_cluster_and_group(hyperpod, prometheus, run_checks):
    """The EFA exporter scraped by the node's IP (``instance="10.1.0.12:9100"``, as an ec2/Kubernetes service
    discovery scrape sets it) names the HyperPod node through ListClusterNodes' PrivateDnsHostname."""
    writer = OpenMetricsWriter(datetime.now(UTC))
    for n in range(len(hyperpod)):
        drops = {"rdmap16s27": {"rx_drops": 30}} if n == 2 else None
        writer.efa_node({"instance": f"10.1.0.{10 + n}:9100", "job": "efa_node_exporter"}, ["rdmap16s27"], drops)
    url = prometheus(writer.text())

    # efa-errors reads EC2 inventory by name; with a HyperPod check selected the name is found as HyperPod's.
    report = run_checks(["efa-errors", "hyperpod-node-unhealthy"], cluster=HP, metrics={"url": url}, **SETTLED)

    [finding] = report.findings
    assert finding.resource == hyperpod[2] and finding.evidence["source"] == "prometheus"
    # increase() extrapolates to each period's edges: at least the 30 drops, shown as whole packets.
    assert finding.evidence["totals"]["rx_drops"] >= 30
    assert re.match(rf"{HP}/workers \({hyperpod[2]}\) counted \d+ dropped received packets on EFA device rdmap16s27 ",
                    finding.summary)
    assert report.errors == [] and report.status is Status.WARNING
