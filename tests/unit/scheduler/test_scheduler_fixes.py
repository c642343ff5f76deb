"""Fixes through the scheduler, plan -> approve -> apply -> verify -> audit, against the real Slurm (drain and
resume, moto behind the AWS side) and the loopback Kubernetes API (cordon)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.seed_health import eventbridge_event
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.remediation.actions import RemediationError, build_call
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.approval import Approval, ApprovalRequired
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.remediation.plan import plan_fix
from fmdoctor.spot.events import INTERRUPTION_EVENT

from ...conftest import CLUSTER, REGION
from .k8s_server import k8s_api, write_kubeconfig
from .slurm_cluster import SlurmCluster

FAULTY = "scheduler-schedules-faulty-node"
HELD = "scheduler-node-held-out"
SYSLOG = "/aws/parallelcluster/test/syslog"


@pytest.fixture
def nodes(builder, aws):
    """Two Spot p4d nodes (with their 4 EFA interfaces) whose
    Slurm names (ip-10-0-1-11, ip-10-0-1-13) a tag carries, as sites tag them."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-3"], "p4d.24xlarge", "private-a", ["efa"], spot=True, efa_interfaces=4)
    ids = {name: builder.launched[name].id for name in ("gpu-1", "gpu-3")}
    for name, slurm_name in (("gpu-1", "ip-10-0-1-11"), ("gpu-3", "ip-10-0-1-13")):
        aws.client("ec2").create_tags(Resources=[ids[name]], Tags=[{"Key": "slurm-node", "Value": slurm_name}])
    queue = aws.client("sqs").create_queue(QueueName="spot-events")["QueueUrl"]
    # the nodes' syslog group (no Xid in it): the Xid fault kind is read, so the fix is not refused as unverified
    aws.client("logs").create_log_group(logGroupName=SYSLOG)
    return ids, queue


def doctor(queue: str, **scheduler) -> Doctor:
    settings = {"spot": {"queue_url": queue}, "gpu": {"hostname_tags": ["slurm-node"]},
                "training": {"log_groups": [SYSLOG]},
                "scheduler": {"kind": "slurm", **scheduler}}
    return Doctor(settings=Settings.model_validate({"clusters": {CLUSTER: settings}}),
                  connection=Connection(region=REGION))


def interrupt(aws, queue, instance_id):
    event = eventbridge_event(INTERRUPTION_EVENT, instance_id, datetime.now(UTC) - timedelta(seconds=20), REGION,
                              "123456789012", **{"instance-action": "terminate"})
    aws.client("sqs").send_message(QueueUrl=queue, MessageBody=event)


def test_drain_a_node_slurm_still_schedules_onto_then_read_it_back(slurm: SlurmCluster, nodes, aws, tmp_path):
    ids, queue = nodes
    interrupt(aws, queue, ids["gpu-3"])
    job = slurm.sbatch("llama-pretrain", ["ip-10-0-1-13"])
    audit = AuditLog(tmp_path / "audit.jsonl")
    d = doctor(queue)

    [finding] = d.check(CLUSTER, only=[FAULTY]).findings
    assert finding.resource == ids["gpu-3"] and [j["id"] for j in finding.evidence["jobs"]] == [job]
    assert "Slurm still schedules onto ip-10-0-1-13" in finding.summary

    plan = plan_fix(d, CLUSTER, FAULTY, audit=audit)
    [call] = plan.calls
    assert (call["service"], call["operation"], call["action"]) == ("slurm", "UpdateNode", "drain-slurm-node")
    assert call["params"]["NodeName"] == "ip-10-0-1-13" and call["params"]["State"] == "DRAIN"
    assert call["params"]["Reason"].startswith("fmdoctor: EC2 Spot terminate at ")

    with pytest.raises(ApprovalRequired):
        apply_fix(d, plan, None, audit=audit)
    assert "drain" not in slurm.state("ip-10-0-1-13")  # nothing without approval

    result = apply_fix(d, plan, Approval.grant(plan, approver="alice", channel="test"), audit=audit,
                       verify_delays=())
    assert result.ok, result.to_json_dict()
    [outcome] = result.outcomes
    assert outcome.status == "applied" and "read back from Slurm: ip-10-0-1-13 is " in outcome.detail
    assert "DRAIN" in outcome.detail and call["params"]["Reason"] in outcome.detail
    assert slurm.state("ip-10-0-1-13") in ("draining", "drng")  # the job finishes; nothing new starts
    assert [e["event"] for e in audit.read()] == ["plan", "approval-refused", "approval", "apply", "verify"]
    assert audit.read()[-1]["outcome"] == "verified"

    again = apply_fix(d, plan, Approval.grant(plan, approver="alice", channel="test"), audit=audit,
                      verify_delays=())
    assert again.outcomes[0].status == "already-present"


def test_resume_a_node_held_out_is_verified_by_the_check(slurm: SlurmCluster, nodes, tmp_path):
    _, queue = nodes
    slurm.drain("ip-10-0-1-11", "fmdoctor: spot terminate (cancelled)")
    d = doctor(queue, held_out_after="0s")
    audit = AuditLog(tmp_path / "audit.jsonl")
    plan = plan_fix(d, CLUSTER, HELD, audit=audit)
    assert [(c["action"], c["params"]) for c in plan.calls] == [
        ("resume-slurm-node", {"NodeName": "ip-10-0-1-11", "State": "RESUME"})]
    result = apply_fix(d, plan, Approval.grant(plan, approver="bob", channel="test"), audit=audit, verify_delays=())
    assert result.ok and result.verification.status == "verified"
    assert "drain" not in slurm.state("ip-10-0-1-11")


def test_a_drain_slurm_refuses_is_a_failed_call_not_a_pass(slurm: SlurmCluster, nodes, aws, tmp_path):
    """slurmrestd of Slurm 22.05 has no node update: the plan's call fails, with why, and nothing changed."""
    ids, queue = nodes
    interrupt(aws, queue, ids["gpu-3"])
    d = doctor(queue, slurm={"via": "slurmrestd", "url": slurm.rest_url, "token_env": "FMDOCTOR_TEST_SLURM_JWT",
                                     "user": "root"})
    import os

    os.environ["FMDOCTOR_TEST_SLURM_JWT"] = slurm.token("root")
    try:
        plan = plan_fix(d, CLUSTER, FAULTY, audit=AuditLog(tmp_path / "a.jsonl"))
        result = apply_fix(d, plan, Approval.grant(plan, approver="alice", channel="test"),
                           audit=AuditLog(tmp_path / "a.jsonl"), verify_delays=())
    finally:
        del os.environ["FMDOCTOR_TEST_SLURM_JWT"]
    assert result.failed and not result.ok
    assert result.outcomes[0].code == "SlurmrestdNoNodeUpdate"
    assert "drain" not in slurm.state("ip-10-0-1-13")


@pytest.mark.parametrize(("hint", "problem"), [
    ({"action": "drain-slurm-node", "node": "ip-10-0-1-13"}, "reason"),
    ({"action": "drain-slurm-node", "node": "ip-10-0-1-13", "reason": "two\nlines"}, "one line"),
    ({"action": "drain-slurm-node", "node": "x; rm -rf /", "reason": "r"}, "node must match"),
    ({"action": "drain-slurm-node", "node": "-x", "reason": "r"}, "node must match"),
    ({"action": "cordon-k8s-node", "node": "Upper_Case"}, "node must match"),
])
def test_hints_are_validated_field_by_field(hint, problem):
    with pytest.raises(RemediationError, match=problem):
        build_call(hint, FAULTY, "f")


def test_cordon_and_uncordon_a_kubernetes_node_read_back(tmp_path):
    from fmdoctor.config import SchedulerSettings
    from fmdoctor.scheduler.changes import change_node

    with k8s_api() as (url, api):
        settings = SchedulerSettings.model_validate(
            {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(write_kubeconfig(tmp_path / "kc", url))}})
        name = "ip-10-0-1-22.us-west-2.compute.internal"
        done = change_node(settings, "kubernetes", {"name": name, "unschedulable": True})
        assert done.status == "applied" and "unschedulable=True" in done.detail
        assert api.node(name)["spec"]["unschedulable"] is True
        assert api.patches == [("application/strategic-merge-patch+json", {"spec": {"unschedulable": True}})]
        assert change_node(settings, "kubernetes", {"name": name, "unschedulable": True}).status == "already-present"
        back = change_node(settings, "kubernetes", {"name": name, "unschedulable": False})
        assert back.status == "applied" and "unschedulable" not in api.node(name)["spec"]
        missing = change_node(settings, "kubernetes", {"name": "nope", "unschedulable": True})
        assert (missing.status, missing.code) == ("failed", "NotFound")


def test_drain_a_kubernetes_node_evicts_its_pods_and_leaves_daemonsets(tmp_path):
    from fmdoctor.config import SchedulerSettings
    from fmdoctor.scheduler.changes import change_node

    with k8s_api() as (url, api):
        settings = SchedulerSettings.model_validate(
            {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(write_kubeconfig(tmp_path / "kc", url))}})
        name = "ip-10-0-1-21.us-west-2.compute.internal"
        [call] = [build_call({"action": "drain-k8s-node", "node": name}, FAULTY, "f")]
        done = change_node(settings, call.service, call.params)
        assert done.status == "applied" and "1 pod(s) evicted" in done.detail, done
        assert api.node(name)["spec"]["unschedulable"] is True
        assert api.evictions == [("training", "llama-train-worker-0", "Eviction")]
        left = {p["metadata"]["name"] for p in api.pods["items"] if p["spec"].get("nodeName") == name}
        assert left == {"nvidia-device-plugin-daemonset-7xk2p", "aws-efa-k8s-device-plugin-daemonset-q9tbn"}
        assert change_node(settings, call.service, call.params).status == "already-present"


def test_an_approval_for_one_node_drains_no_other(slurm: SlurmCluster, nodes, aws, tmp_path):
    """The approval digest covers the call's NodeName: the plan edited after approval to name another node (or
    the approval presented with another node's plan) is refused, and neither node changes."""
    ids, queue = nodes
    interrupt(aws, queue, ids["gpu-3"])
    audit = AuditLog(tmp_path / "audit.jsonl")
    d = doctor(queue)
    plan = plan_fix(d, CLUSTER, FAULTY, audit=audit)
    approval = Approval.grant(plan, approver="alice", channel="test")
    plan.steps[0].params["NodeName"] = "ip-10-0-1-11"
    with pytest.raises((ApprovalRequired, RemediationError)):
        apply_fix(d, plan, approval, audit=audit, verify_delays=())
    assert "drain" not in slurm.state("ip-10-0-1-11") and "drain" not in slurm.state("ip-10-0-1-13")
