"""Slurm as a source, over the real Slurm 22.05 (tests/unit/scheduler/slurm_cluster.py): what sinfo/squeue and
slurmrestd print is parsed to the states and reasons Slurm itself set, and the jobs running on each node."""

from __future__ import annotations

import pytest

from fmdoctor.scheduler import slurm as slurm_mod
from fmdoctor.scheduler.model import SchedulerUnavailable

from .slurm_cluster import SlurmCluster


def test_local_reads_the_inval_node_slurm_set_itself_and_a_drain_with_its_reason(slurm: SlurmCluster):
    slurm.drain("ip-10-0-1-12", "Kill task failed")
    job = slurm.sbatch("train-llm", ["ip-10-0-1-11"])
    view = slurm_mod.read_local()
    assert view.version.startswith("22.05")
    bad = view.node("ip-10-0-1-14")
    assert bad is not None and bad.has("INVALID_REG", "INVAL") and bad.has("DRAIN")
    assert bad.reason == "gres/gpu count reported lower than configured (0 < 8)"
    assert bad.configured == {"gpu": 8}
    drained = view.node("ip-10-0-1-12")
    assert drained is not None and drained.has("DRAIN") and drained.reason == "Kill task failed"
    assert drained.reason_by == "root"
    healthy = view.node("ip-10-0-1-13")
    assert healthy is not None and not healthy.has("DRAIN", "DOWN", "INVALID_REG") and healthy.reason == ""
    assert "127.0.0.1" in healthy.addresses
    running = view.jobs_on("ip-10-0-1-11")
    assert [(j.id, j.name, j.user, j.nodes) for j in running] == [(job, "train-llm", "root", ("ip-10-0-1-11",))]
    assert running[0].elapsed_s is not None and running[0].elapsed_s >= 0
    assert view.jobs_on("ip-10-0-1-13") == []


def test_a_multi_node_job_lists_every_node_of_its_host_list(slurm: SlurmCluster):
    job = slurm.sbatch("two-nodes", ["ip-10-0-1-11", "ip-10-0-1-13"])
    view = slurm_mod.read_local()
    found = [j for j in view.jobs if j.id == job]
    assert found and found[0].nodes == ("ip-10-0-1-11", "ip-10-0-1-13")


def test_slurmrestd_as_an_unprivileged_user_answers_the_same_view(slurm: SlurmCluster):
    slurm.drain("ip-10-0-1-12", "Not responding")
    job = slurm.sbatch("rest-job", ["ip-10-0-1-13"])
    rest = slurm_rest(slurm)
    view = rest.read()
    assert view.source.startswith("slurmrestd") and view.version.startswith("22.05")
    assert rest.api() == "v0.0.38"
    local = slurm_mod.read_local()
    assert {n.name: (n.states, n.reason) for n in view.nodes} == {n.name: (n.states, n.reason) for n in local.nodes}
    assert [j.id for j in view.jobs_on("ip-10-0-1-13")] == [job]


def test_slurmrestd_with_a_bad_token_is_access_denied_not_an_empty_cluster(slurm: SlurmCluster):
    rest = slurm_mod.RestSlurm(slurm_session_url(slurm), "not-a-jwt", "root")
    with pytest.raises(SchedulerUnavailable) as raised:
        rest.read()
    assert raised.value.code in ("AccessDenied", "SlurmrestdFailed") and "token" in raised.value.grant


def test_slurm_22_05_slurmrestd_cannot_update_nodes_and_says_so(slurm: SlurmCluster):
    with pytest.raises(SchedulerUnavailable) as raised:
        slurm_rest(slurm).update("ip-10-0-1-13", "DRAIN", "test")
    assert raised.value.code == "SlurmrestdNoNodeUpdate"
    assert "drain" not in slurm.state("ip-10-0-1-13")


def slurm_session_url(cluster: SlurmCluster) -> str:
    return cluster.rest_url


def slurm_rest(cluster: SlurmCluster) -> slurm_mod.RestSlurm:
    return slurm_mod.RestSlurm(cluster.rest_url, cluster.token("root"), "root")
