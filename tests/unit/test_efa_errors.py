"""efa-errors against moto's CloudWatch: the agent's EFA counters (per eniId) rising, or not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.metrics import MetricsPublisher, launch_nodes
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import Severity, Status

from ..conftest import CLUSTER, REGION

COUNTERS = ("efa_retrans_timeout_events", "efa_impaired_remote_conn_events", "efa_unresponsive_remote_events",
            "efa_rx_dropped")
SETTLED = {"gpu": {"startup_grace": "0s"}}


@pytest.fixture
def efa_nodes(builder):
    return launch_nodes(builder, 3, "p4d.24xlarge", efa_interfaces=4)


@pytest.fixture
def publish(aws):
    return MetricsPublisher(aws.client("cloudwatch"), datetime.now(UTC))


def quiet(publish, nodes, skip=()):
    for node in nodes:
        for card, eni in enumerate(node.efa_enis()):
            if eni not in skip:
                publish.efa_interface(eni, f"rdmap{16 + card}s27", metrics=COUNTERS)


def test_quiet_counters_pass(efa_nodes, publish, run_checks):
    quiet(publish, efa_nodes)
    publish.flush()
    report = run_checks(["efa-errors"], **SETTLED)
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    # efa-errors alone reads the EFA counters only (Check.metrics): its 4 metric names listed, 48 EFA queries
    # in one fetch, no GPU series.
    assert report.stats.api_calls["cloudwatch.ListMetrics"] == 4
    assert report.stats.api_calls["cloudwatch.GetMetricData"] == 1
    # With a GPU check in the run, one snapshot shared by both: 4 EFA + 5 GPU metric names listed, and
    # Container Insights' utilization for the GPU nodes that publish none.
    shared = run_checks(["efa-errors", "gpu-idle"], **SETTLED)
    assert shared.stats.api_calls["cloudwatch.ListMetrics"] == 10


@pytest.fixture
def metric_calls(monkeypatch):
    """The metric names each CloudWatch ListMetrics and GetMetricData call of a run asked for."""
    from fmdoctor.engine.aws import Aws

    asked: list[tuple[str, str]] = []
    init = Aws.__init__

    def record(params, model, **_):
        if model.name == "ListMetrics":
            asked.append(("ListMetrics", params.get("MetricName", "")))
        for query in params.get("MetricDataQueries", []):
            asked.append(("GetMetricData", query["MetricStat"]["Metric"]["MetricName"]))

    def recording(self, session, options=None):
        init(self, session, options)
        session.events.register("provide-client-params.cloudwatch", record)

    monkeypatch.setattr(Aws, "__init__", recording)
    return asked


@pytest.mark.parametrize("sick", [False, True])
def test_efa_only_asks_for_no_gpu_series_and_judges_the_same(efa_nodes, publish, metric_calls, sick):
    """`--only efa` lists and fetches EFA counters only; the EFA checks say the same as with the GPU series there."""
    eni = efa_nodes[1].efa_enis()[2]
    quiet(publish, efa_nodes, skip={eni} if sick else ())
    if sick:
        publish.efa_interface(eni, "rdmap18s27", {"efa_retrans_timeout_events": 30}, metrics=COUNTERS)
    publish.flush()
    settings = Settings.model_validate({"clusters": {CLUSTER: SETTLED}})
    doctor = Doctor(settings=settings, connection=Connection(region=REGION), clock=lambda: publish.now)
    alone = doctor.check(CLUSTER, only=["efa"])
    asked_alone = list(metric_calls)
    together = doctor.check(CLUSTER, only=["efa", "gpu-idle"])  # the same clock: the same window
    assert {name for _, name in asked_alone} == set(COUNTERS) and asked_alone
    assert {name for _, name in metric_calls} > set(COUNTERS)  # the shared snapshot did list GPU names
    ran = set(alone.stats.checks_run)
    assert "efa-errors" in ran
    assert [f for f in together.findings if f.check in ran] == alone.findings
    assert [e for e in together.errors if e.check in ran] == alone.errors
    assert bool([f for f in alone.findings if f.check == "efa-errors"]) is sick


def test_retransmit_timeouts_on_one_interface_are_critical(efa_nodes, publish, run_checks):
    sick = efa_nodes[1].efa_enis()[2]
    quiet(publish, efa_nodes, skip={sick})
    publish.efa_interface(sick, "rdmap18s27", {"efa_retrans_timeout_events": 30, "efa_rx_dropped": 4},
                          metrics=COUNTERS)
    publish.flush()

    [finding] = run_checks(["efa-errors"], **SETTLED).findings

    assert finding.resource == efa_nodes[1].id and finding.severity is Severity.CRITICAL
    [interface] = finding.evidence["interfaces"]
    assert interface == {"eni": sick, "device": "rdmap18s27", "network_card": 2,
                         "counters": {"efa_retrans_timeout_events": 30.0, "efa_rx_dropped": 4.0}}
    assert finding.evidence["critical_counters"] == ["efa_retrans_timeout_events"]
    assert finding.evidence["interfaces_publishing"] == 4
    assert "30 retransmit timeouts" in finding.summary


def test_dropped_packets_alone_are_a_warning(efa_nodes, publish, run_checks):
    eni = efa_nodes[0].efa_enis()[0]
    quiet(publish, efa_nodes, skip={eni})
    publish.efa_interface(eni, "rdmap16s27", {"efa_rx_dropped": 12}, metrics=COUNTERS)
    publish.flush()
    [finding] = run_checks(["efa-errors"], **SETTLED).findings
    assert finding.severity is Severity.WARNING and finding.evidence["critical_counters"] == []


def test_counters_found_without_instance_dimension_by_eni(efa_nodes, publish, run_checks):
    """The agent's EFA counters carry device, port and eniId only; the cluster's interfaces are matched by eniId."""
    quiet(publish, efa_nodes)
    publish.efa_interface("eni-0000000000000dead", "rdmap16s27", {"efa_retrans_timeout_events": 99})  # not ours
    publish.flush()
    assert run_checks(["efa-errors"], **SETTLED).findings == []


def test_node_without_counters_is_not_verified(efa_nodes, publish, run_checks):
    quiet(publish, efa_nodes[:2])
    publish.flush()
    report = run_checks(["efa-errors"], **SETTLED)
    [error] = report.errors
    assert error.code == "NoMetrics" and efa_nodes[2].id in error.unverified
    assert report.status is Status.WARNING


def test_no_counters_anywhere_is_not_verified_never_passed_nor_not_applicable(efa_nodes, run_checks):
    report = run_checks(["efa-errors"], **SETTLED)
    assert report.skipped == [] and report.findings == []
    [error] = report.errors
    assert error.code == "NoMetrics" and all(n.id in error.unverified for n in efa_nodes)
    assert "no node publishes EFA counters" in error.message and report.status is Status.UNKNOWN


def test_no_efa_is_not_applicable(builder, run_checks):
    launch_nodes(builder, 2)
    assert run_checks(["efa-errors"], **SETTLED).skipped[0].reason == "no running compute node has EFA interfaces"
