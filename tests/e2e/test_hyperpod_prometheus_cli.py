"""A SageMaker HyperPod cluster's GPUs and EFA devices judged from a real Prometheus, as users run it: the installed
CLI over HTTP against moto's server (ListClusterNodes), ``--cluster`` naming the HyperPod cluster, ``--only`` a
family, ``--metrics-url`` a loopback Prometheus (Debian's package) backfilled with DCGM and EFA exporter history."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

import pytest

from fmdoctor.demo import moto_compat
from fmdoctor.demo.moto_health import create_p5_hyperpod
from fmdoctor.demo.openmetrics import OpenMetricsWriter
from fmdoctor.demo.prometheus_server import binaries, loopback_prometheus

pytestmark = pytest.mark.e2e
HP = "hp-train"


@pytest.fixture
def prometheus():
    if binaries() is None:
        pytest.skip("needs a real Prometheus: prometheus and promtool are not on PATH (apt-get install prometheus; "
                    "CI's .ci/run installs it)")
    with contextlib.ExitStack() as stack:
        yield lambda history: stack.enter_context(loopback_prometheus(history))


def _hyperpod(session) -> list[str]:
    """Four p5 workers and a controller, as ListClusterNodes reports them (their DNS names as HyperPod sets them)."""
    moto_compat.install()
    return create_p5_hyperpod(session, "us-west-2", HP)


def test_only_efa_and_only_gpu_judge_a_hyperpod_cluster_from_prometheus(moto_server, fmdoctor_cli, prometheus,
                                                                        tmp_path):
    workers = _hyperpod(moto_server.session())
    writer = OpenMetricsWriter(datetime.now(UTC))
    for n in range(len(workers)):
        # Slurm nodes: the DCGM exporter's Hostname is the node's host name; the EFA exporter is scraped by IP.
        writer.dcgm_node({"Hostname": f"ip-10-1-0-{10 + n}", "instance": "localhost:9400", "job": "dcgm_exporter"},
                         1.0 if n == 0 else 95.0, xid={5: (79, 3)} if n == 3 else None)
        drops = {"rdmap16s27": {"rx_drops": 40}} if n == 1 else None
        writer.efa_node({"instance": f"10.1.0.{10 + n}:9100", "job": "efa_node_exporter"}, ["rdmap16s27"], drops)
    url = prometheus(writer.text())
    config = tmp_path / "fmdoctor.yaml"
    config.write_text(json.dumps({"clusters": {HP: {"gpu": {"startup_grace": "0s"}}}}))  # JSON is YAML

    def check(only: str) -> dict:
        result = fmdoctor_cli("check", "--cluster", HP, "--region", "us-west-2", "--endpoint-url", moto_server.url,
                              "--config", str(config), "--metrics-url", url, "--format", "json", "--only", only)
        assert result.code in {0, 1, 2}, result.stderr
        return result.json()

    efa = check("efa")
    assert [(f["check"], f["resource"]) for f in efa["findings"]] == [("efa-errors", workers[1])]
    [finding] = efa["findings"]
    assert finding["evidence"]["source"] == "prometheus" and finding["evidence"]["prometheus_url"] == url
    assert finding["evidence"]["totals"]["rx_drops"] >= 40
    assert not [e for e in efa["errors"] if e["check"] == "efa-errors"]

    gpu = check("gpu")
    found = {(f["check"], f["resource"]) for f in gpu["findings"]}
    assert found == {("gpu-idle", workers[0]), ("gpu-xid-metrics", workers[3])}
    assert all(f["evidence"]["prometheus_url"] == url for f in gpu["findings"])
    # gpu-xid reads the node's own kernel log, which a cluster run cannot: the only entry the family leaves.
    assert {e["check"] for e in gpu["errors"]} <= {"gpu-xid"}
    for report in (efa, gpu):
        # HyperPod's nodes listed once; one label-values call and one query_range per metric, whatever the nodes.
        assert report["stats"]["api_calls"]["sagemaker.ListClusterNodes"] == 1
        assert report["stats"]["queries"]["prometheus.label_values"] == 1
