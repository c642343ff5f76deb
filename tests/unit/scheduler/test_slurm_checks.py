"""scheduler-node-down and scheduler-node-held-out over the real Slurm (slurm_cluster.py): the INVAL Slurm set
itself, drains with their reasons, the jobs on each node, and the jobs every other node finding lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.engine.model import Severity, Status

from .slurm_cluster import SlurmCluster
from .worlds import instance, inventory, run

SLURM = {"scheduler": {"kind": "slurm"}}
I11, I12, I13, I14 = "i-0000000000000a011", "i-0000000000000a012", "i-0000000000000a013", "i-0000000000000a014"


@pytest.fixture
def world():
    """Four p5 instances whose addresses Slurm's node names (ip-10-0-1-1N) carry, as on HyperPod/ParallelCluster."""
    return inventory(*(instance(i, f"10.0.1.{n}") for i, n in ((I11, 11), (I12, 12), (I13, 13), (I14, 14))))


def test_inval_and_drained_nodes_with_slurms_reasons_mapped_to_instances(slurm: SlurmCluster, world):
    slurm.drain("ip-10-0-1-12", "Kill task failed")
    job = slurm.sbatch("llama-pretrain", ["ip-10-0-1-11"])
    report = run(world, ["scheduler-node-down"], **SLURM)
    assert report.errors == []
    by = {f.resource: f for f in report.findings}
    assert set(by) == {I12, I14}
    inval = by[I14]
    assert "gres/gpu count reported lower than configured (0 < 8)" in inval.summary
    assert "INVALID_REG" in inval.evidence["scheduler_node"]["states"] and inval.severity is Severity.WARNING
    assert inval.evidence["instance"] == I14 and inval.evidence["instance_state"] == "running"
    drained = by[I12]
    assert '"Kill task failed"' in drained.summary and drained.evidence["scheduler_node"]["reason_by"] == "root"
    assert drained.evidence["jobs"] == [] and drained.evidence["job_count"] == 0
    assert all(j["id"] != job for f in report.findings for j in f.evidence["jobs"])  # it runs on a node Slurm keeps


def test_a_healthy_slurm_passes(slurm: SlurmCluster):
    healthy = inventory(instance(I11, "10.0.1.11"), instance(I13, "10.0.1.13"))
    report = run(healthy, ["scheduler-node-down"], **SLURM)
    # ip-10-0-1-14 (INVAL) is Slurm's, not one of these instances: still reported, by its Slurm name
    assert [f.resource for f in report.findings] == ["slurm:ip-10-0-1-14"]
    assert "no instance of the cluster matched it" in report.findings[0].summary


def test_every_node_is_up_when_slurm_says_so(slurm: SlurmCluster, world, monkeypatch):
    """The same check on a view where the gres node is not configured: nothing to report."""
    from fmdoctor.scheduler import slurm as slurm_source

    real = slurm_source.read_local

    def without_gres_node():
        view = real()
        from dataclasses import replace

        return replace(view, nodes=tuple(n for n in view.nodes if n.name != "ip-10-0-1-14"))

    report = run(world, ["scheduler-node-down"], extras={"scheduler_reader": lambda kind, s: without_gres_node()},
                 **SLURM)
    assert report.findings == [] and report.errors == [] and report.status is Status.OK


def test_held_out_is_a_heuristic_warning_with_a_resume_fix(slurm: SlurmCluster, world):
    slurm.drain("ip-10-0-1-13", "fmdoctor: spot interruption")
    later = datetime.now(UTC) + timedelta(hours=2)
    report = run(world, ["scheduler-node-held-out"], now=later, **SLURM)
    assert [f.resource for f in report.findings] == [I13]
    finding = report.findings[0]
    assert finding.severity is Severity.WARNING and finding.evidence["heuristic"] is True
    assert finding.evidence["fix"] == [{"action": "resume-slurm-node", "node": "ip-10-0-1-13"}]
    assert "a heuristic" in finding.summary
    # INVAL (Slurm re-judges it at registration) is never "held out"
    assert I14 not in {f.resource for f in report.findings}


def test_held_out_waits_for_the_configured_time_and_for_idle(slurm: SlurmCluster, world):
    slurm.drain("ip-10-0-1-13", "maintenance")
    assert run(world, ["scheduler-node-held-out"], **SLURM).findings == []  # drained a moment ago
    slurm.resume("ip-10-0-1-13")
    slurm.sbatch("busy", ["ip-10-0-1-13"])
    slurm.drain("ip-10-0-1-13", "maintenance")  # DRAINING: a job still runs there
    later = datetime.now(UTC) + timedelta(hours=2)
    assert run(world, ["scheduler-node-held-out"], now=later, **SLURM).findings == []


def test_slurm_commands_that_fail_are_not_verified(slurm: SlurmCluster, world, monkeypatch, tmp_path):
    broken = tmp_path / "slurm.conf"
    broken.write_text("ClusterName=x\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\n")
    monkeypatch.setenv("SLURM_CONF", str(broken))
    report = run(world, ["scheduler-node-down", "scheduler-node-held-out"], **SLURM)
    assert report.findings == [] and report.status is Status.UNKNOWN
    assert {e.code for e in report.errors} == {"SlurmCommandFailed"}
    assert "login or head node" in report.errors[0].message


def test_other_node_findings_list_the_jobs_on_their_node(slurm: SlurmCluster, world):
    """The annotator: a finding of another check on an instance gets Slurm's jobs there."""
    from fmdoctor.engine.model import Finding


    job = slurm.sbatch("llama-pretrain", ["ip-10-0-1-11", "ip-10-0-1-13"])
    from fmdoctor.checks._scheduler import annotate_jobs as annotate
    from fmdoctor.config import ClusterSettings
    from fmdoctor.engine.context import RunScope

    scope = RunScope("c", ClusterSettings.model_validate(SLURM), None, world, datetime.now(UTC))
    xid = Finding(check="gpu-xid", severity=Severity.CRITICAL, resource=f"{I13}/gpu3", summary="Xid 79",
                  evidence={}, runbook="gpu-xid")
    other = Finding(check="efa-errors", severity=Severity.WARNING, resource=I12, summary="x", evidence={},
                    runbook="efa-errors")
    cluster_wide = Finding(check="placement-group", severity=Severity.WARNING, resource="c", summary="x",
                           evidence={}, runbook="placement-group")
    annotate(scope, [xid, other, cluster_wide])
    assert xid.evidence["scheduler_nodes"] == ["ip-10-0-1-13"]
    [listed] = xid.evidence["jobs"]
    assert (listed["id"], listed["name"], listed["user"], listed["nodes"]) == (
        job, "llama-pretrain", "root", ["ip-10-0-1-11", "ip-10-0-1-13"])
    assert listed["elapsed_s"] >= 0
    assert other.evidence["jobs"] == []  # known: nothing runs there
    assert "jobs" not in cluster_wide.evidence
