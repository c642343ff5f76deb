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
from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.demo.moto_health import create_p5_hyperpod
from fmdoctor.demo.openmetrics import OpenMetricsWriter
from fmdoctor.engine.model import Status
from fmdoctor.metrics.dcgm import PromResult
from fmdoctor.metrics.prometheus import Endpoint, PrometheusClient
from fmdoctor.metrics.source import started_reason, starting_reason
from fmdoctor.runbooks.library import get_runbook
from fmdoctor.runbooks.render import render_runbook

HP = "hp-train"
GPU_CHECKS = ["gpu-metrics-missing", "gpu-idle", "gpu-straggler", "gpu-memory-pressure", "gpu-xid-metrics"]
SETTLED = {"gpu": {"startup_grace": "0s"}}


@pytest.fixture
def hyperpod(aws):
    """A HyperPod cluster of four p5 workers and a controller, as ListClusterNodes reports them."""
    return create_p5_hyperpod(aws, "us-west-2", HP)


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
    # Evidence names the source that answered; the runbook queries that Prometheus, and replaces the HyperPod node.
    assert (finding.evidence["prometheus_url"], finding.evidence["prometheus_auth"]) == (url, "none")
    assert finding.evidence["hyperpod_cluster"] == HP
    page = render_runbook(get_runbook("efa-errors"), finding, HP, "us-west-2")
    assert f"curl -s {url}api/v1/query_range --data-urlencode 'query=increase(" in page
    assert "node_amazonefa_(rx_drops|rdma_read_wr_err|rdma_write_wr_err)" in page
    assert "device rdmap16s27" in page and "None" not in page and "aws cloudwatch" not in page
    assert (f"aws sagemaker batch-replace-cluster-nodes --region us-west-2 --cluster-name {HP} "
            f"--node-ids {hyperpod[2]}") in page


@pytest.mark.parametrize("only", [["efa"], ["gpu"], ["efa-errors"]])
def test_a_family_or_one_check_reaches_a_hyperpod_cluster_named_by_cluster(hyperpod, prometheus, run_checks, only):
    """``--only efa`` (or gpu, or one metric check) with ``--cluster <HyperPod cluster>``: the name is looked up
    as a HyperPod cluster (ListClusterNodes), not refused as a cluster without EC2 instances, and its nodes are
    judged from Prometheus."""
    writer = OpenMetricsWriter(datetime.now(UTC))
    for n, node in enumerate(hyperpod):
        writer.dcgm_node({"Hostname": f"hyperpod-{node}"}, 2.0 if n == 1 else 95.0)
        drops = {"rdmap16s27": {"rx_drops": 30}} if n == 2 else None
        writer.efa_node({"instance": f"10.1.0.{10 + n}:9100", "job": "efa_node_exporter"}, ["rdmap16s27"], drops)
    url = prometheus(writer.text())

    report = run_checks(only, cluster=HP, metrics={"url": url}, **SETTLED)

    found = {(f.check, f.resource) for f in report.findings}
    wanted = {("efa-errors", hyperpod[2])} if only != ["gpu"] else {("gpu-idle", hyperpod[1])}
    assert found == wanted
    assert report.stats.api_calls["sagemaker.ListClusterNodes"] == 1
    assert report.stats.queries["prometheus.label_values"] == 1
    # Nothing metric-based was skipped as "not applicable" for want of nodes.
    assert not [s for s in report.skipped if s.check in {"efa-errors", *GPU_CHECKS}
                and "no running" in str(getattr(s, "reason", s))]


def test_a_prometheus_that_has_just_started_is_not_verified_never_healthy(hyperpod, prometheus, run_checks):
    """A Prometheus holding only the last few minutes of the window (it was just started, or just began
    receiving the exporters' series): its short history says nothing about the exporters (no gpu-metrics-missing
    finding blaming them), and no check calls the nodes healthy (efa-errors' counters did not rise *yet*)."""
    writer = OpenMetricsWriter(datetime.now(UTC), periods=1)  # 5 minutes of a 30-minute window
    for n, node in enumerate(hyperpod):
        writer.dcgm_node({"Hostname": f"hyperpod-{node}"}, 95.0, tensor_active=0.5)
        writer.efa_node({"instance": f"10.1.0.{10 + n}:9100"}, ["rdmap16s27"])
    url = prometheus(writer.text())

    report = run_checks([*GPU_CHECKS, "efa-errors"], cluster=HP, metrics={"url": url}, **SETTLED)

    assert report.findings == [] and report.skipped == []
    assert {(e.check, e.code) for e in report.errors} == {(c, "MetricSourceStarting") for c in [*GPU_CHECKS,
                                                                                               "efa-errors"]}
    error = report.errors[0]
    assert "of 4 nodes" in error.unverified
    assert re.search(r"holds samples only since \S+ \(1 of the window's 6 periods, under gpu.min_coverage_percent "
                     r"50%\)", error.message)
    assert report.status is Status.UNKNOWN


def test_series_listed_without_a_sample_in_the_window_are_not_verified():
    """A store that lists the exporters' metric names for the window (Mimir and AMP answer label values by block)
    but answers no sample of them in it: not judgeable; a store that holds none of them is gpu-metrics-missing's
    case (no series), and one that holds enough of the window is judged."""
    now = datetime.now(UTC)
    start, period = now - timedelta(minutes=30), timedelta(minutes=5)
    prometheus = Endpoint("http://prometheus.monitoring:9090/")
    names = frozenset({"DCGM_FI_DEV_GPU_UTIL"})
    listed = PromResult({}, {}, {}, 2, names, None)
    assert "lists DCGM/EFA exporter series but holds no sample of them from" in starting_reason(
        listed, prometheus, start, now, period, 50.0)
    assert starting_reason(PromResult({}, {}, {}, 1, frozenset(), None), prometheus, start, now, period, 50.0) == ""
    held = PromResult({}, {}, {}, 2, names, now - timedelta(minutes=15))  # 4 of 6 periods
    assert starting_reason(held, prometheus, start, now, period, 50.0) == ""
    assert "(4 of the window's 6 periods, under gpu.min_coverage_percent 80%)" in starting_reason(
        held, prometheus, start, now, period, 80.0)


def test_uncorrectable_ecc_errors_in_dcgm_are_judged_as_the_node_check_judges_them(hyperpod, prometheus, run_checks):
    """DCGM_FI_DEV_ECC_DBE_VOL_TOTAL (enabled in the exporter's counters) rising on GPU 2 of a node: critical,
    reset the GPU (NVIDIA's verdict for Xid 48, Double Bit ECC Error; node-gpu-health's for nvidia-smi's volatile
    uncorrected count). A count held from before the window stands too; zero counts are healthy."""
    writer = OpenMetricsWriter(datetime.now(UTC))
    for n, node in enumerate(hyperpod):
        ecc = {0: {2: (3, 4)}, 1: {5: (1, 0)}}.get(n, {})
        writer.dcgm_node({"Hostname": f"hyperpod-{node}"}, 95.0, ecc_dbe=ecc)
    url = prometheus(writer.text())

    report = run_checks(["gpu-xid-metrics"], cluster=HP, metrics={"url": url}, **SETTLED)

    found = {f.resource: f for f in report.findings}
    assert set(found) == {hyperpod[0], hyperpod[1]} and report.errors == []
    rising, held = found[hyperpod[0]], found[hyperpod[1]]
    assert (rising.severity.value, rising.evidence["action"]) == ("critical", "reset")
    assert [(x["gpu"], x["xid"], x["held_from_before_window"]) for x in rising.evidence["xids"]] == [("2", 48, False)]
    assert "Uncorrectable (double-bit) ECC errors" in rising.evidence["xids"][0]["meaning"]
    assert [(x["gpu"], x["held_from_before_window"]) for x in held.evidence["xids"]] == [("5", True)]


def test_a_prometheus_started_inside_the_window_without_exporter_series_is_not_verified(hyperpod, prometheus,
                                                                                         run_checks):
    """Prometheus started seconds ago and has scraped nothing from the exporters yet (it holds only its own
    ``up``): its runtimeinfo startTime says so, and no node is blamed for a missing exporter."""
    now = datetime.now(UTC).timestamp()
    url = prometheus(f'# TYPE up gauge\nup{{job="prometheus",instance="localhost:9090"}} 1 {now - 30:.3f}\n# EOF\n')

    report = run_checks([*GPU_CHECKS, "efa-errors"], cluster=HP, metrics={"url": url}, **SETTLED)

    assert report.findings == []
    assert {(e.check, e.code) for e in report.errors} == {(c, "MetricSourceStarting") for c in [*GPU_CHECKS,
                                                                                               "efa-errors"]}
    assert re.search(r"started at \S+, \S+ before the window's end, and holds no DCGM or EFA exporter series yet",
                     report.errors[0].message)
    assert report.stats.queries == {"prometheus.label_values": 1, "prometheus.runtimeinfo": 1}


def test_only_a_prometheus_started_inside_the_window_is_starting_and_amp_is_never_asked():
    now = datetime.now(UTC)
    start = now - timedelta(minutes=30)
    prometheus = Endpoint("http://prometheus.monitoring:9090/")
    assert started_reason(now - timedelta(days=3), prometheus, start, now) == ""
    assert started_reason(None, prometheus, start, now) == ""  # Mimir, Thanos: no runtimeinfo
    assert "started at" in started_reason(now - timedelta(minutes=2), prometheus, start, now)
    calls: list[tuple[str, str]] = []
    amp = PrometheusClient(Endpoint("https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-1/", "sigv4"),
                           lambda *call: calls.append(call))
    assert amp.started() is None and calls == []  # AMP's query API has no status endpoints
