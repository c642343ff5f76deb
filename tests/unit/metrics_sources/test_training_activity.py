"""training-stalled's metric signals: with no checkpoint configured and the job's logs silent, GPUs that run
kernels without tensor work on every node while EFA moves no RDMA bytes are a hung collective; tensor work is a
job computing. DCGM and EFA exporter series in a real Prometheus (OpenMetricsWriter), HyperPod nodes from moto."""

from __future__ import annotations

from datetime import UTC, datetime

from fmdoctor.demo.openmetrics import OpenMetricsWriter
from fmdoctor.engine.model import Severity

from .test_hyperpod_metrics import HP, SETTLED, hyperpod  # noqa: F401 (the fixture)

ONLY = ["training-stalled"]


def history(workers: list[str], tensor_active: float, rdma_idle: bool) -> str:
    writer = OpenMetricsWriter(datetime.now(UTC))
    eks = {"job": "dcgm-exporter", "namespace": "hyperpod-observability"}
    for n, node in enumerate(workers):
        writer.dcgm_node({"Hostname": f"hyperpod-{node}", **eks}, 97.0, tensor_active=tensor_active)
        writer.efa_node({"instance": f"10.1.0.{10 + n}:9100", "job": "efa_node_exporter"}, ["rdmap16s27"],
                        rdma_idle=rdma_idle)
    return writer.text()


def test_every_gpu_spinning_with_no_rdma_traffic_is_a_stall(hyperpod, prometheus, run_checks):  # noqa: F811
    url = prometheus(history(hyperpod, tensor_active=0.0, rdma_idle=True))
    report = run_checks(ONLY, cluster=HP, metrics={"url": url}, **SETTLED)
    [finding] = report.findings
    activity = finding.evidence["gpu_activity"]
    assert set(activity["spinning"]) == set(hyperpod) and activity["nodes_judged"] == 4
    assert activity["rdma_bytes"] == 0
    assert all(n["utilization"] >= 90 and n["tensor_active"] == 0 for n in activity["spinning"].values())
    assert finding.severity is Severity.WARNING and finding.evidence["culprits"] == []
    assert "ran kernels without tensor work" in finding.summary and "EFA moved no RDMA bytes" in finding.summary
    assert {e.code for e in report.errors} == {"NoLogGroup"}  # which node did it needs the logs


def test_tensor_work_or_rdma_traffic_is_no_stall(hyperpod, prometheus, run_checks):  # noqa: F811
    url = prometheus(history(hyperpod, tensor_active=0.45, rdma_idle=False))
    report = run_checks(ONLY, cluster=HP, metrics={"url": url}, **SETTLED)
    assert report.findings == []
    assert "NoProgressSignal" not in {e.code for e in report.errors}  # the GPUs' tensor work is the signal


def test_spinning_gpus_while_rdma_still_moves_are_not_called_a_hang(hyperpod, prometheus, run_checks):  # noqa: F811
    url = prometheus(history(hyperpod, tensor_active=0.0, rdma_idle=False))
    report = run_checks(ONLY, cluster=HP, metrics={"url": url}, **SETTLED)
    assert report.findings == []


def test_unreadable_gpu_metrics_are_named_under_the_check_that_needed_them(hyperpod, run_checks):  # noqa: F811
    """Nothing answers at the metrics URL (the discard port) and no log group exists: the check is not verified,
    and under --only training-stalled (no GPU check to report it) the failed metrics read is its own error."""
    report = run_checks(ONLY, cluster=HP, metrics={"url": "http://127.0.0.1:9"}, **SETTLED)
    assert report.findings == [] and report.status == "unknown"
    [gpus] = [e for e in report.errors if e.unverified == "whether the job's GPUs still do tensor work"]
    assert gpus.check == "training-stalled" and "could not be read" in gpus.message


def test_gpu_metrics_read_without_tensor_activity_are_no_read_failure(hyperpod, prometheus, run_checks):  # noqa: F811
    """The metrics were read but no GPU publishes tensor activity: still not verified (no log group), and no read
    failure is claimed for them."""
    url = prometheus(history(hyperpod, tensor_active=None, rdma_idle=False))
    report = run_checks(ONLY, cluster=HP, metrics={"url": url}, **SETTLED)
    assert report.findings == [] and report.status == "unknown"
    assert {e.code for e in report.errors} == {"NoLogGroup"}
