"""plan -> pre-flight -> approve -> apply -> verify against moto, for the EFA security-group fix."""

from __future__ import annotations

import dataclasses
import os
import stat

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.remediation.actions import RemediationError
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.approval import Approval, ApprovalRequired
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.remediation.plan import plan_fix
from fmdoctor.remediation.preflight import preflight

CLUSTER = "test-cluster"
CHECK = "efa-sg-self-reference"


@pytest.fixture
def broken(builder):
    """Two p4d nodes whose EFA group has no self rule in either direction (only the default egress)."""
    group = builder.security_group("efa")
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    return group


@pytest.fixture
def audit(tmp_path):
    return AuditLog(tmp_path / "audit.jsonl")


def doctor(aws_factory=None) -> Doctor:
    kwargs = {"aws_factory": aws_factory} if aws_factory else {}
    return Doctor(settings=Settings.model_validate({"clusters": {CLUSTER: {}}}),
                  connection=Connection(region="us-west-2"), **kwargs)


def rules(ec2, group):
    found = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])
    return sorted(((r["IsEgress"], r["IpProtocol"], (r.get("ReferencedGroupInfo") or {}).get("GroupId"),
                    r.get("CidrIpv4")) for r in found["SecurityGroupRules"]), key=str)


def approve(plan):
    return Approval.grant(plan, approver="alice", channel="test")


def test_fix_removes_the_finding_and_a_second_run_changes_nothing(builder, broken, audit):
    d = doctor()
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    assert [(c["operation"], c["params"]["GroupId"]) for c in plan.calls] == [
        ("AuthorizeSecurityGroupIngress", broken), ("AuthorizeSecurityGroupEgress", broken)]
    assert plan.calls[0]["params"]["IpPermissions"] == [
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": broken, "Description": f"fmdoctor fix {CHECK}"}]}]
    assert plan.findings == (f"{CHECK}/{broken}",) and plan.account == "123456789012"
    assert preflight(d, plan, audit=audit).ok

    result = apply_fix(d, plan, approve(plan), audit=audit, verify_delays=())

    assert result.ok and result.verification.status == "verified"
    assert [o.status for o in result.outcomes] == ["applied", "applied"]
    assert (True, "-1", broken, None) in rules(builder.ec2, broken) and (False, "-1", broken, None) in rules(
        builder.ec2, broken)
    assert d.check(CLUSTER, only=[CHECK]).findings == []

    before = rules(builder.ec2, broken)
    again = plan_fix(d, CLUSTER, CHECK, audit=audit)
    assert again.empty and again.findings == () and again.calls == []
    assert rules(builder.ec2, broken) == before


def test_recomputed_plan_skips_rules_already_there_and_duplicates_count_as_done(builder, broken, audit):
    d = doctor()
    stale = plan_fix(d, CLUSTER, CHECK, audit=audit)  # ingress and egress
    self_rule = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": broken}]}]
    builder.ec2.authorize_security_group_ingress(GroupId=broken, IpPermissions=self_rule)  # someone else fixed half

    fresh = plan_fix(d, CLUSTER, CHECK, audit=audit)
    assert [c["operation"] for c in fresh.calls] == ["AuthorizeSecurityGroupEgress"]

    # Applying the stale plan anyway: the duplicate is "already present", not an error.
    result = apply_fix(d, stale, approve(stale), audit=audit, verify_delays=())
    assert [o.status for o in result.outcomes] == ["already-present", "applied"]
    assert result.outcomes[0].code == "InvalidPermission.Duplicate"
    assert result.ok


def test_preflight_changes_nothing(builder, broken, audit):
    d = doctor()
    before = rules(builder.ec2, broken)
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    checked = preflight(d, plan, audit=audit)
    assert [c.status for c in checked.checks] == ["allowed", "allowed"]
    assert all(c.code == "DryRunOperation" for c in checked.checks)
    assert rules(builder.ec2, broken) == before


def test_denied_action_is_named_by_the_preflight(builder, broken, audit, faults):
    faults.deny("ec2", "AuthorizeSecurityGroupEgress", code="UnauthorizedOperation")
    d = doctor(faults.aws_factory)
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    checked = preflight(d, plan, audit=audit)
    assert not checked.ok
    assert checked.denied_actions == ["ec2:AuthorizeSecurityGroupEgress"]
    [denied] = [c for c in checked.checks if c.status == "denied"]
    assert "grant ec2:AuthorizeSecurityGroupEgress" in denied.detail
    assert faults.injected == {"ec2.AuthorizeSecurityGroupEgress:DryRun": 1}
    assert audit.read()[-1]["outcome"] == "denied: ec2:AuthorizeSecurityGroupEgress"


def test_failure_midway_reports_what_was_applied_and_what_was_not(builder, broken, audit, faults):
    # The pre-flight passes; the real egress call is denied (a policy with a condition DryRun did not meet).
    faults.deny("ec2", "AuthorizeSecurityGroupEgress", code="UnauthorizedOperation", dry_run=False)
    d = doctor(faults.aws_factory)
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    assert preflight(d, plan, audit=audit).ok
    result = apply_fix(d, plan, approve(plan), audit=audit, verify_delays=())
    assert [o.status for o in result.outcomes] == ["applied", "failed"]
    assert result.outcomes[1].iam_action == "ec2:AuthorizeSecurityGroupEgress"
    assert not result.ok and result.verification.status == "still-present"
    apply_record = next(e for e in audit.read() if e["event"] == "apply")
    assert apply_record["outcome"] == "failed"
    assert [r["status"] for r in apply_record["results"]] == ["applied", "failed"]


def test_first_call_failing_leaves_the_rest_unattempted(builder, broken, audit, faults):
    faults.fail("ec2", "AuthorizeSecurityGroupIngress", "InvalidGroup.NotFound", "gone", dry_run=False)
    d = doctor(faults.aws_factory)
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    result = apply_fix(d, plan, approve(plan), audit=audit, verify_delays=())
    assert [o.status for o in result.outcomes] == ["failed", "not-attempted"]
    assert rules(builder.ec2, broken) == [(True, "-1", None, "0.0.0.0/0")]  # nothing changed


@pytest.mark.parametrize("make_approval", [
    lambda plan: None,
    lambda plan: Approval(plan_digest="0" * 64, approver="alice", channel="test"),
    lambda plan: Approval(plan_digest=plan.digest, approver=" ", channel="test"),
    lambda plan: {"plan_digest": plan.digest, "approver": "agent", "channel": "llm"},
], ids=["missing", "other-plan", "no-approver", "not-an-approval"])
def test_apply_refuses_without_a_matching_approval(builder, broken, audit, make_approval):
    d = doctor()
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    before = rules(builder.ec2, broken)
    with pytest.raises(ApprovalRequired, match="refusing to apply the fix"):
        apply_fix(d, plan, make_approval(plan), audit=audit)
    assert rules(builder.ec2, broken) == before
    assert audit.read()[-1]["event"] == "approval-refused"


def test_a_plan_changed_after_approval_is_refused(builder, broken, audit):
    d = doctor()
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    approval = approve(plan)
    other = builder.security_group("other")
    plan.steps[0].params["GroupId"] = other  # the params dict is plain data; the digest is recomputed
    with pytest.raises(ApprovalRequired, match="plan changed since it was approved"):
        apply_fix(d, plan, approval, audit=audit)
    shorter = dataclasses.replace(plan, steps=plan.steps[1:])
    with pytest.raises(ApprovalRequired):
        apply_fix(d, shorter, approval, audit=audit)
    assert rules(builder.ec2, other) == [(True, "-1", None, "0.0.0.0/0")]


def test_plan_for_another_region_is_refused(builder, broken, audit):
    plan = plan_fix(doctor(), CLUSTER, CHECK, audit=audit)
    elsewhere = Doctor(settings=Settings.model_validate({"clusters": {CLUSTER: {}}}),
                       connection=Connection(region="us-east-1"))
    with pytest.raises(RemediationError, match="the plan is for us-west-2"):
        apply_fix(elsewhere, plan, approve(plan), audit=audit)


def test_audit_log_holds_every_step(builder, broken, audit):
    d = doctor()
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    preflight(d, plan, audit=audit)
    apply_fix(d, plan, approve(plan), audit=audit, verify_delays=())
    records = audit.read()
    assert [r["event"] for r in records] == ["plan", "preflight", "approval", "apply", "verify"]
    for record in records:
        assert record["cluster"] == CLUSTER and record["check"] == CHECK and record["region"] == "us-west-2"
        assert record["plan_digest"] == plan.digest and record["calls"] == plan.calls
        assert record["who"]["local_user"] and record["who"]["iam_arn"] == "arn:aws:sts::123456789012:user/moto"
        assert record["ts"].endswith("Z")
    assert records[2]["approval"]["approver"] == "alice" and records[2]["approval"]["channel"] == "test"
    assert records[4]["outcome"] == "verified"
    assert stat.S_IMODE(os.stat(audit.path).st_mode) == 0o600


def test_default_audit_path_is_the_xdg_state_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert AuditLog().path == tmp_path / "state" / "fmdoctor" / "audit.jsonl"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert AuditLog().path == tmp_path / ".local" / "state" / "fmdoctor" / "audit.jsonl"
    monkeypatch.setenv("FMDOCTOR_AUDIT_LOG", str(tmp_path / "x.jsonl"))
    assert AuditLog().path == tmp_path / "x.jsonl"


def test_report_and_resource_narrow_the_plan(builder, broken, audit):
    d = doctor()
    report = d.check(CLUSTER, only=[CHECK]).to_json_dict()
    assert len(plan_fix(d, CLUSTER, CHECK, report=report, audit=audit).steps) == 2
    stale = {**report, "findings": [{**report["findings"][0], "resource": "sg-0123456789abcdef0"}]}
    narrowed = plan_fix(d, CLUSTER, CHECK, report=stale, audit=audit)
    assert narrowed.empty and "no longer raised" in narrowed.notes[0]
    assert plan_fix(d, CLUSTER, CHECK, resource="sg-0123456789abcdef0", audit=audit).empty
    assert len(plan_fix(d, CLUSTER, CHECK, resource=broken, audit=audit).steps) == 2
    with pytest.raises(RemediationError, match="for cluster 'other'"):
        plan_fix(d, CLUSTER, CHECK, report={**report, "cluster": "other"}, audit=audit)


def test_plan_refuses_when_the_check_cannot_read_the_state(builder, broken, audit, faults):
    faults.deny("ec2", "DescribeSecurityGroupRules", code="UnauthorizedOperation")
    with pytest.raises(RemediationError, match="could not verify the current state"):
        plan_fix(doctor(faults.aws_factory), CLUSTER, CHECK, audit=audit)


def test_findings_without_fix_hints_are_manual(builder, audit):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    builder.launch(["gpu-2"], "p4d.24xlarge", "private-b", ["efa"], efa_interfaces=4)
    plan = plan_fix(doctor(), CLUSTER, "efa-subnet-spread", audit=audit)
    assert plan.empty and plan.findings == ()
    assert [m["runbook"] for m in plan.manual] == ["efa-subnet-spread"]
