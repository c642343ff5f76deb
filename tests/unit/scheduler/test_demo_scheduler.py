"""The demo's scheduler view (fmdoctor/demo/scheduler.py) as `check --demo` shows it: the job on the culprit
node, the Spot node Slurm still schedules onto, the INVAL and the long-drained node, the Kubernetes faults; and
`check --scheduler` choosing the scheduler for one run against the real Slurm."""

from __future__ import annotations

import json

from fmdoctor.engine.model import Severity


def test_the_culprit_and_the_spot_node_name_the_job_they_hit(demo_check):
    facts, report = demo_check.facts, demo_check.report
    job = facts["scheduler"]["slurm_job"]
    [stalled] = report.findings_for("training-stalled")
    assert stalled.resource == facts["training"]["culprit"]
    assert [(j["id"], j["name"], j["user"]) for j in stalled.evidence["jobs"]] == [
        (job, "llama-70b-pretrain", "mlops")]
    assert stalled.evidence["jobs"][0]["nodes"] == list(facts["scheduler"]["slurm_nodes"].values())
    assert stalled.evidence["scheduler_nodes"] == ["train-st-p5-2"]
    by = {f.resource: f for f in report.findings_for("scheduler-schedules-faulty-node")}
    faulty = by[facts["spot"]["interrupted"]]
    assert faulty.severity is Severity.CRITICAL and faulty.evidence["fault_kinds"] == ["spot"]
    assert faulty.evidence["fix"][0]["action"] == "drain-slurm-node" and faulty.evidence["jobs"][0]["id"] == job
    # the training culprit's Xid 79 (its kernel log line and its DCGM series): Slurm still schedules onto it
    xid = by[facts["training"]["culprit"]]
    assert xid.severity is Severity.CRITICAL and xid.evidence["fault_kinds"] == ["xid"]
    sources = [f["source"] for f in xid.evidence["faults"]]
    assert "Xid 79" in xid.summary and len(set(sources)) == len(sources) and set(sources) <= {"logs", "prometheus"}
    assert xid.evidence["fix"] == [{"action": "drain-slurm-node", "node": "train-st-p5-2",
                                    "reason": "fmdoctor: Xid 79 (reboot)"}]
    assert [j["id"] for j in xid.evidence["jobs"]] == [job]
    assert not [e for e in report.errors if e.check == "scheduler-schedules-faulty-node"]  # every source read
    # every finding on a node Slurm knows lists what runs there (or that nothing does); the head node is none
    slurm_nodes = {i for name, i in facts["nodes"].items() if name.startswith("gpu-node-")}
    on_nodes = [f for f in report.findings if f.resource in slurm_nodes]
    bare = [(f.check, f.resource, sorted(f.evidence)) for f in on_nodes
            if "jobs" not in f.evidence and "jobs_unverified" not in f.evidence]
    assert on_nodes and bare == []


def test_slurm_holds_out_the_inval_and_the_drained_node(demo_check):
    report = demo_check.report
    down = {f.evidence["scheduler_node"]["name"]: f for f in report.findings_for("scheduler-node-down")}
    assert set(down) == {"train-st-p5-5", "train-st-p5-6"}
    assert "gres/gpu count reported lower than configured (7 < 8)" in down["train-st-p5-5"].summary
    [held] = report.findings_for("scheduler-node-held-out")
    assert held.evidence["scheduler_node"]["name"] == "train-st-p5-6"
    assert held.evidence["fix"] == [{"action": "resume-slurm-node", "node": "train-st-p5-6"}]


def test_the_kubernetes_view(demo_check):
    report = demo_check.report
    assert [f.resource for f in report.findings_for("k8s-node-not-ready")] == [
        "kubernetes:hyperpod-i-0d3e0a1b2c3d40003"]
    assert [f.resource for f in report.findings_for("k8s-device-plugin-missing")] == [
        "kubernetes:hyperpod-i-0d3e0a1b2c3d40002"]
    assert [f.resource for f in report.findings_for("k8s-gpu-pods-pending")] == ["pod/inference/llama-serve-2"]
    assert not [e for e in report.errors if e.check.startswith(("k8s-", "scheduler-"))]


def test_the_scheduler_flag_picks_the_scheduler_for_one_run(slurm, builder, capsys):
    from fmdoctor.cli.main import main

    from ...conftest import CLUSTER, REGION

    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa"])
    args = ["check", "--cluster", CLUSTER, "--region", REGION, "--format", "json", "--no-progress",
            "--only", "scheduler-node-down"]
    assert main([*args, "--scheduler", "slurm"]) == 1  # warning: the INVAL node
    found = json.loads(capsys.readouterr().out)["findings"]
    assert [f["resource"] for f in found] == ["slurm:ip-10-0-1-14"]
    main([*args, "--scheduler", "none"])
    out = json.loads(capsys.readouterr().out)
    assert out["findings"] == [] and [s["check"] for s in out["skipped"]] == ["scheduler-node-down"]
