"""`--demo` shows findings from both sources: CloudWatch for its EC2 nodes, a loopback Prometheus (Debian's binary)
for its HyperPod cluster's DCGM history; without the binary the HyperPod GPUs are not verified and the demo says
how to see them."""

from __future__ import annotations

import contextlib

from fmdoctor.demo import prometheus_server
from fmdoctor.demo.runtime import demo_environment, demo_settings
from fmdoctor.engine.api import Connection, Doctor

CHECKS = ["gpu-idle", "gpu-xid-metrics", "gpu-metrics-missing"]


def run(world):
    return Doctor(settings=demo_settings(world), connection=Connection(region=world.region)).check(
        world.cluster, only=CHECKS)


def test_the_demo_reads_hyperpod_gpus_from_its_embedded_prometheus(prometheus):
    with demo_environment() as world:
        report = run(world)
        hyperpod, nodes = world.facts["hyperpod"], world.facts["nodes"]
        assert world.facts["prometheus_url"].startswith("http://127.0.0.1:") and world.notes == []
        assert demo_settings(world).cluster(world.cluster).metrics.url == world.facts["prometheus_url"]

    by_source = {(f.check, f.resource, f.evidence["source"]) for f in report.findings}
    assert ("gpu-idle", nodes[world.facts["gpu"]["idle"]], "cloudwatch") in by_source
    assert ("gpu-idle", hyperpod["idle"], "prometheus") in by_source
    [xid] = report.findings_for("gpu-xid-metrics")
    assert xid.resource == hyperpod["xid"] and xid.severity.value == "critical"
    assert [(x["gpu"], x["xid"]) for x in xid.evidence["xids"]] == [(hyperpod["xid_gpu"], hyperpod["xid_code"])]
    # The failed worker is hyperpod-node-unhealthy's; the healthy one passes; no HyperPod node is missing.
    judged = {f.resource for f in report.findings}
    assert hyperpod["failed_node"] not in judged and hyperpod["healthy"] not in judged
    assert [f.resource for f in report.findings_for("gpu-metrics-missing")] == [nodes["gpu-node-6"]]
    assert report.stats.queries["prometheus.label_values"] == 1


def test_without_the_binary_the_demo_says_how_to_see_hyperpod_gpus(monkeypatch):
    monkeypatch.setattr(prometheus_server, "binaries", lambda: None)
    with demo_environment() as world:
        report = run(world)
        [note] = world.notes
        assert demo_settings(world).cluster(world.cluster).metrics.url is None
    assert "apt-get install prometheus" in note
    unseen = [e for e in report.errors if e.code == "NoMetricSource"]
    assert {e.check for e in unseen} == set(CHECKS)
    assert all(world.facts["hyperpod"]["idle"] in e.unverified or "3 nodes" in e.unverified for e in unseen)
    assert report.findings_for("gpu-idle")  # the EC2 nodes' CloudWatch findings are still there


def test_a_prometheus_that_does_not_start_leaves_the_demo_running_and_says_so(monkeypatch):
    @contextlib.contextmanager
    def fails(_history):
        def ready():  # the backfill started; the server does not answer
            raise RuntimeError("prometheus did not become ready in 60s: opening blocks")

        yield ready

    monkeypatch.setattr(prometheus_server, "binaries", lambda: ("/usr/bin/prometheus", "/usr/bin/promtool"))
    monkeypatch.setattr(prometheus_server, "starting_prometheus", fails)
    with demo_environment() as world:
        [note] = world.notes
        assert demo_settings(world).cluster(world.cluster).metrics.url is None
    assert "did not start (prometheus did not become ready" in note and "not verified" in note


def test_a_backfill_that_cannot_start_during_seeding_leaves_the_demo_running_and_says_so(monkeypatch, tmp_path):
    # The demo starts promtool as soon as the history is seeded; a binary that cannot be run fails right there.
    missing = str(tmp_path / "promtool")
    monkeypatch.setattr(prometheus_server, "binaries", lambda: (str(tmp_path / "prometheus"), missing))
    with demo_environment() as world:
        [note] = world.notes
        assert demo_settings(world).cluster(world.cluster).metrics.url is None
    assert f"did not start ([Errno 2] No such file or directory: '{missing}')" in note and "not verified" in note
    assert not list(tmp_path.iterdir())
