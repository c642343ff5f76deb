"""Table cases for the scheduler parsers and judges: Slurm's three JSON shapes (22.05's recorded from the real
Slurm; 23.02+ and 23.11+ as their data parsers write them, https://slurm.schedmd.com/rest_api.html), GRES strings,
host lists, error documents, the scheduler kinds auto finds, and the rank layout from a job's node list."""

from __future__ import annotations

import pytest

from fmdoctor.checks._scheduler import job_rank_hosts
from fmdoctor.config import ClusterSettings, SchedulerSettings
from fmdoctor.engine.hyperpod import HyperPodCluster
from fmdoctor.engine.inventory import Inventory
from fmdoctor.scheduler import slurm
from fmdoctor.scheduler.hostlist import expand
from fmdoctor.scheduler.model import SLURM, SchedulerJob, SchedulerNode, SchedulerView
from fmdoctor.scheduler.source import SchedulerMap, detect_kinds

from .worlds import instance, inventory


@pytest.mark.parametrize(("raw", "states"), [
    ({"state": "idle", "state_flags": ["DRAIN"]}, {"IDLE", "DRAIN"}),  # 22.05 (v0.0.38)
    ({"state": "unknown", "state_flags": ["DRAIN", "INVALID_REG"]}, {"UNKNOWN", "DRAIN", "INVALID_REG"}),
    ({"state": ["IDLE", "DRAIN"]}, {"IDLE", "DRAIN"}),  # 23.02+ (v0.0.39+): one list
    ({"state": ["DOWN", "NOT_RESPONDING"]}, {"DOWN", "NOT_RESPONDING"}),
    ({"state": "idle*"}, {"IDLE", "NOT_RESPONDING"}),  # sinfo's compact '*' suffix
    ({"state": "allocated"}, {"ALLOCATED"}),
])
def test_node_states_in_each_versions_shape(raw, states):
    assert slurm.parse_node({"name": "n1", **raw}).states == states


@pytest.mark.parametrize(("value", "number"), [
    (1796429610, 1796429610), ({"set": True, "infinite": False, "number": 17}, 17),  # 23.11+
    ({"set": False, "number": 0}, None), ({"set": True, "infinite": True, "number": 0}, None),
    (None, None), (True, None), ("12", None),
])
def test_numbers_in_each_versions_shape(value, number):
    assert slurm._number(value) == number


@pytest.mark.parametrize(("gres", "counts"), [
    ("gpu:8", {"gpu": 8}), ("gpu:h100:8(S:0-1)", {"gpu": 8}), ("gpu:a100:4,gpu:v100:2", {"gpu": 6}),
    ("gpu:h100:8,shard:16", {"gpu": 8, "shard": 16}), ("", {}), ("(null)", {}), ("N/A", {}), ("gpu", {"gpu": 1}),
    # sockets not contiguous: Slurm's bit_fmt writes them with a comma inside the parentheses (src/common/bitstring.c)
    ("gpu:h100:4(S:0,2),gpu:h100:4(S:1,3)", {"gpu": 8}),
])
def test_gres(gres, counts):
    assert slurm.parse_gres(gres) == counts


@pytest.mark.parametrize(("hostlist", "names"), [
    ("gpu-1", ["gpu-1"]), ("gpu-[1-3]", ["gpu-1", "gpu-2", "gpu-3"]), ("gpu-[01-03]", ["gpu-01", "gpu-02", "gpu-03"]),
    ("a-[1,3-4],b-2", ["a-1", "a-3", "a-4", "b-2"]), ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
    ("train-st-p5-[9-11]", ["train-st-p5-9", "train-st-p5-10", "train-st-p5-11"]), ("", []),
])
def test_hostlists_expand_as_scontrol_show_hostnames(hostlist, names):
    assert expand(hostlist) == names


@pytest.mark.parametrize("bad", ["gpu-[1-3", "gpu-1]", "gpu-[3-1]", "gpu-[a-b]", "gpu-[0-99999999]"])
def test_malformed_hostlists_are_refused(bad):
    with pytest.raises(ValueError):
        expand(bad)


def test_running_jobs_only_with_elapsed_from_start():
    doc = {"jobs": [
        {"job_id": 7, "name": "a", "user_name": "u", "nodes": "n[1-2]", "job_state": "RUNNING", "start_time": 100},
        {"job_id": {"set": True, "number": 8}, "name": "b", "user_name": "u", "nodes": "n3", "job_state": ["RUNNING"],
         "start_time": {"set": True, "number": 150}},
        {"job_id": 9, "name": "c", "user_name": "u", "nodes": "", "job_state": "PENDING", "start_time": 0},
    ]}
    jobs = slurm.parse_jobs(doc, now=200)
    assert [(j.id, j.nodes, j.elapsed_s) for j in jobs] == [("7", ("n1", "n2"), 100), ("8", ("n3",), 50)]


@pytest.mark.parametrize(("doc", "what", "problem"), [
    ({"errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}, "nodes", "Unspecified error"),
    ({"errors": [{"description": "Failed while looking for jobs", "error_number": -1, "error": "Unspecified error",
                  "source": "slurm_load_jobs"}], "jobs": []}, "jobs", "Failed while looking for jobs"),
    ({"errors": [], "nodes": []}, "nodes", None),  # an empty cluster is an answer
    ({"errors": [{"error": "x"}], "nodes": [{"name": "n"}]}, "nodes", None),  # data wins over a warning
    ("not json", "nodes", "not a JSON object"),
])
def test_error_documents(doc, what, problem):
    found = slurm.document_errors(doc, what)
    assert (found is None) if problem is None else (problem in found)


@pytest.mark.parametrize(("node", "state", "reason", "argv"), [
    ("n1", "DRAIN", "Kill task failed",
     ["scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=Kill task failed"]),
    ("n1", "RESUME", None, ["scontrol", "update", "NodeName=n1", "State=RESUME"]),
    ("n1", "DRAIN", "$(reboot); `id` 'x'", ["scontrol", "update", "NodeName=n1", "State=DRAIN",
                                           "Reason=$(reboot); `id` 'x'"]),  # one argv item, no shell
])
def test_scontrol_argv(node, state, reason, argv):
    assert slurm.update_argv(node, state, reason) == argv


@pytest.mark.parametrize(("node", "state", "reason"), [
    ("n1;id", "DRAIN", "r"), ("n1", "DOWN", "r"), ("n1", "DRAIN", None), ("n1", "DRAIN", "a\nb"),
    ("n1", "DRAIN", "x" * 300),
])
def test_scontrol_refuses(node, state, reason):
    with pytest.raises(ValueError):
        slurm.update_argv(node, state, reason)


def _settings(**values):
    return SchedulerSettings.model_validate(values)


@pytest.mark.parametrize(("settings", "tags", "hyperpod", "logs", "sinfo", "kinds"), [
    ({"kind": "none"}, {"parallelcluster:cluster-name": "c"}, None, (), True, ()),
    ({"kind": "slurm"}, {}, None, (), False, ("slurm",)),
    ({}, {"parallelcluster:queue-name": "q"}, None, (), False, ("slurm",)),
    ({}, {"aws:pcs:compute-node-group-id": "g"}, None, (), False, ("slurm",)),
    ({}, {"eks:cluster-name": "c"}, None, (), False, ("kubernetes",)),
    ({}, {"kubernetes.io/cluster/c": "owned"}, None, (), False, ("kubernetes",)),
    ({}, {}, "Slurm", (), False, ("slurm",)),
    ({}, {}, "Eks", (), False, ("kubernetes",)),
    ({}, {}, None, ("/aws/parallelcluster/c",), False, ("slurm",)),
    ({}, {}, None, (), True, ("slurm",)),
    ({}, {"eks:cluster-name": "c"}, "Slurm", (), False, ("slurm", "kubernetes")),
    ({}, {"Name": "gpu-1"}, None, ("/aws/batch/job",), False, ()),
])
def test_auto_finds_the_scheduler_from_what_the_cluster_shows(settings, tags, hyperpod, logs, sinfo, kinds):
    node, enis = instance("i-0000000000000a011", "10.0.1.11")
    node = type(node)(**{**node.__dict__, "tags": tags})
    inv = Inventory("c", "us-west-2", instances=(node,), interfaces={e.id: e for e in enis},
                    hyperpod=HyperPodCluster(name="c", arn="arn", status="InService", orchestrator=hyperpod)
                    if hyperpod else None)
    found, why = detect_kinds(_settings(**settings), inv, logs, local_sinfo=lambda: sinfo)
    assert found == kinds and why


def test_config_contract():
    s = ClusterSettings.model_validate({"scheduler": {"kind": "slurm", "slurm": {
        "via": "slurmrestd", "url": "http://head:6820", "token_env": "FMDOCTOR_SLURM_JWT"},
        "kubernetes": {"context": "eks", "kubeconfig": "/k"}}}).scheduler
    assert (s.kind, s.slurm.via, s.slurm.url, s.slurm.token_env, s.kubernetes.context) == (
        "slurm", "slurmrestd", "http://head:6820", "FMDOCTOR_SLURM_JWT", "eks")
    for bad in ({"kind": "pbs"}, {"slurm": {"via": "slurmrestd"}}, {"slurm": {"url": "ftp://x"}},
                {"slurm": {"token_env": "eyJhbGciOi.not-a-name"}}, {"slurm": {"via": "ssh"}}, {"extra": 1}):
        with pytest.raises(ValueError):
            SchedulerSettings.model_validate(bad)


def _map(jobs):
    nodes = tuple(SchedulerNode(f"n{i}", frozenset({"ALLOCATED"})) for i in range(1, 5))
    view = SchedulerView(SLURM, "t", nodes, tuple(jobs))
    inv = inventory(instance("i-0000000000000a011", "10.0.1.11"))
    from fmdoctor.engine.identity import NodeIdentities

    return SchedulerMap(view, NodeIdentities.of(inv), {"n1": "i-0000000000000a011"})


def _job(nodes, job_id="1"):
    return SchedulerJob(job_id, "train", "u", tuple(nodes), "RUNNING")


@pytest.mark.parametrize(("jobs", "per_node", "known", "expected"), [
    ([_job(["n1", "n2"])], 8, {}, {0: "i-0000000000000a011", 7: "i-0000000000000a011", 8: "n2", 15: "n2"}),
    ([_job(["n2", "n1"])], 8, {}, {0: "n2", 8: "i-0000000000000a011"}),  # node-list order, not name order
    ([_job(["n1", "n2"])], 8, {9: "n2"}, {8: "n2"}),  # agrees with a rank the logs place
    ([_job(["n1", "n2"])], 8, {9: "n1"}, None),  # contradicted by the logs: not used
    ([_job(["n1", "n2"]), _job(["n3", "n4"], "2")], 8, {}, None),  # which job is it? not proven
    ([_job(["n1"])], 8, {}, None),  # a one-node job has no cross-node layout to use
    ([_job(["n1", "n2"])], 0, {}, None),
])
def test_rank_layout_from_the_jobs_node_list(jobs, per_node, known, expected):
    found = job_rank_hosts(_map(jobs), per_node, known, lambda name: name)
    if expected is None:
        assert found is None
    else:
        mapped, how = found
        assert {r: mapped[r] for r in expected} == expected and 16 not in mapped and "node-list order" in how
