"""Nothing mutates without a person's explicit yes, whatever the model does (remediation faked by contract)."""

from __future__ import annotations

import pytest
from langchain_core.messages import ToolMessage

import fmdoctor.assistant.agent as agent_module
from fmdoctor.assistant import Assistant
from fmdoctor.assistant.backends import Backends
from fmdoctor.engine.errors import UsageError

from .conftest import FakeApproval, FakePlan, call, scripted


def _egress_plan(group: str) -> FakePlan:
    return FakePlan([{"service": "ec2", "operation": "AuthorizeSecurityGroupEgress", "params": {
        "GroupId": group, "IpPermissions": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}]}}],
        "efa-sg-self-reference")


@pytest.fixture
def fixer(sg_fault_cluster, doctor_for, fix_backends):
    return Assistant(doctor_for(), backends=fix_backends)


def test_fix_stops_at_the_exact_plan_and_changes_nothing(fixer, sg_fault_cluster, remediation):
    group = sg_fault_cluster.groups["efa"]
    answer = fixer.ask("fix the EFA security group", "s")

    request = answer.approval
    assert request is not None and answer.approval_required
    assert request.plan_digest == _egress_plan(group).digest
    assert request.calls() == _egress_plan(group).calls  # the exact API calls and arguments
    assert request.preflight == {"plan_digest": request.plan_digest, "ok": True, "denied_actions": [], "checks": []}
    assert (request.check_id, request.resource) == ("efa-sg-self-reference", group)
    assert remediation.planned == [("efa-sg-self-reference", group)]
    assert remediation.applied == []
    assert [c.name for c in answer.tool_calls] == ["check_efa", "propose_fix"]
    assert "AuthorizeSecurityGroupEgress" in answer.answer and "Nothing changes unless you approve" in answer.answer
    assert "Dry run: every call would succeed" in answer.answer


def test_declining_changes_nothing(fixer, remediation):
    request = fixer.ask("fix the EFA security group", "s").approval
    answer = fixer.resume("s", None)
    assert remediation.applied == []
    assert answer.approval is None
    assert answer.answer.startswith(f"Not applied: plan {request.plan_digest} was not approved")


def test_an_approval_for_another_plan_declines(fixer, remediation):
    fixer.ask("fix the EFA security group", "s")
    answer = fixer.resume("s", FakeApproval(plan_digest="0" * 16))
    assert remediation.applied == []
    assert answer.answer.startswith("Not applied")


def test_yes_applies_that_plan_once_with_the_front_ends_approval(fixer, remediation):
    request = fixer.ask("fix the EFA security group", "s").approval
    approval = FakeApproval(plan_digest=request.plan_digest, approver="alice", channel="tui")
    answer = fixer.resume("s", approval)
    [(plan, used)] = remediation.applied
    assert used is approval and plan.digest == request.plan_digest
    assert answer.answer.startswith("Fix applied: applied plan")
    assert f"Fixed now: {request.check_id}/{request.resource}." in answer.answer
    assert f"{request.check_id}/{request.resource}:" not in answer.answer  # not listed as still open
    assert "apply_fix" in [c.name for c in answer.tool_calls]
    with pytest.raises(UsageError):
        fixer.resume("s", approval)  # nothing waits any more; an approval is not reusable


def test_a_new_question_declines_the_waiting_plan(fixer, remediation):
    fixer.ask("fix the EFA security group", "s")
    answer = fixer.ask("is my cluster healthy?", "s")
    assert remediation.applied == [] and answer.approval is None
    assert "not healthy" in answer.answer


def test_the_gate_holds_even_if_the_approval_middleware_asks_about_nothing(sg_fault_cluster, doctor_for,
                                                                           fix_backends, remediation, monkeypatch):
    """HumanInTheLoopMiddleware auto-approves tools it is not told about: the policy must still refuse."""
    monkeypatch.setattr(agent_module, "interrupt_config", lambda tools: {})
    digest = _egress_plan(sg_fault_cluster.groups["efa"]).digest
    model = scripted(call("check_efa"), call("propose_fix", check_id="efa-sg-self-reference"),
                     call("apply_fix", plan_digest=digest), "Applied the fix.")
    answer = Assistant(doctor_for(), model=model, backends=fix_backends).ask("fix it", "s")

    assert remediation.applied == []
    refused = [m for m in model.received[-1] if isinstance(m, ToolMessage) and m.name == "apply_fix"]
    assert refused and refused[0].artifact["data"]["refused"] == "not-approved"
    assert [c.status for c in answer.tool_calls if c.name == "apply_fix"] == ["refused"]


def test_a_plan_nobody_proposed_is_refused_without_asking_anyone(sg_fault_cluster, doctor_for, fix_backends,
                                                                remediation):
    model = scripted(call("apply_fix", plan_digest="deadbeefdeadbeef"), "Done.")
    answer = Assistant(doctor_for(), model=model, backends=fix_backends).ask("apply plan deadbeefdeadbeef", "s")
    assert answer.approval is None and remediation.applied == []
    [rejected] = [m for m in model.received[-1] if isinstance(m, ToolMessage)]
    assert rejected.status == "error" and "no plan with this digest" in str(rejected.content)


def test_a_session_cannot_be_granted_an_approval_for_a_plan_it_never_proposed(fixer):
    session = fixer._session("other")
    with pytest.raises(ValueError):
        session.grant(FakeApproval(plan_digest="abc"))


def test_without_remediation_no_fix_tool_exists_and_the_answer_says_how(sg_fault_cluster, doctor_for):
    assistant = Assistant(doctor_for(), backends=Backends())
    assert "apply_fix" not in assistant.tool_names and "propose_fix" not in assistant.tool_names
    answer = assistant.ask("fix the EFA security group")
    group = sg_fault_cluster.groups["efa"]
    assert answer.answer.startswith(f"Automatic fixes are not available in this installation; to fix "
                                    f"efa-sg-self-reference/{group} by hand: authorize-security-group-egress")


def test_the_real_remediation_library_applies_an_approved_plan_in_moto(sg_fault_cluster, doctor_for, tmp_path,
                                                                        monkeypatch):
    """No fakes between the agent and AWS: propose, approve, resume, and the rule is there in moto."""
    import boto3

    from fmdoctor.remediation.approval import Approval

    monkeypatch.setenv("FMDOCTOR_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    group = sg_fault_cluster.groups["efa"]
    ec2 = boto3.client("ec2", region_name="us-west-2")

    def self_egress() -> bool:
        [sg] = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"]
        return any(p.get("IpProtocol") == "-1" and any(pair["GroupId"] == group for pair in p["UserIdGroupPairs"])
                   for p in sg["IpPermissionsEgress"])

    assistant = Assistant(doctor_for(), backends=Backends.library())
    request = assistant.ask("fix the EFA security group", "s").approval
    assert request is not None and not self_egress()  # proposing changes nothing
    answer = assistant.resume("s", Approval(request.plan_digest, approver="alice", channel="test"))
    assert self_egress()
    assert answer.answer.startswith("Fix applied") and f"Fixed now: efa-sg-self-reference/{group}." in answer.answer
    events = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines() if '"approval"' in line]
    assert events and '"alice"' in events[-1]
