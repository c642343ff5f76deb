"""Every decision about a fix is one audit record, whichever assistant front end it came through (ask, the
TUI and Slack all resume the same Assistant): declined, a forged digest, a plan superseded, a refused tool."""

from __future__ import annotations

import pytest

import fmdoctor.assistant.agent as agent_module
from fmdoctor.assistant import Assistant
from fmdoctor.remediation.approval import Approval
from fmdoctor.remediation.audit import AuditLog

from .conftest import call, scripted

DECISIONS = ("declined", "approval-refused", "approval")


@pytest.fixture
def audited(sg_fault_cluster, doctor_for, tmp_path):
    doctor = doctor_for()
    log = AuditLog(tmp_path / "audit.jsonl")
    doctor.extras["audit_log"] = log  # where every front end puts its log
    return doctor, log


def decisions(log: AuditLog) -> list[dict]:
    return [r for r in log.read() if r["event"] in DECISIONS]


def test_a_person_declining_is_one_record(audited):
    doctor, log = audited
    assistant = Assistant(doctor)
    request = assistant.ask("fix the EFA security group", "s").approval
    assistant.resume("s", None)
    [record] = decisions(log)
    assert record["event"] == "declined" and record["outcome"] == "declined"
    assert record["plan_digest"] == request.plan_digest and record["calls"]


def test_a_forged_digest_is_refused_and_recorded(audited):
    doctor, log = audited
    assistant = Assistant(doctor)
    assistant.ask("fix the EFA security group", "s")
    assistant.resume("s", Approval(plan_digest="0" * 64, approver="mallory", channel="cli"))
    [record] = decisions(log)
    assert record["event"] == "approval-refused" and "forged or stale digest" in record["reason"]
    assert record["approver"] == "mallory"


def test_a_new_question_declines_the_waiting_plan_on_the_record(audited):
    doctor, log = audited
    assistant = Assistant(doctor)
    assistant.ask("fix the EFA security group", "s")
    assistant.ask("is my cluster healthy?", "s")
    [record] = decisions(log)
    assert record["event"] == "declined" and "new question" in record["reason"]


def test_an_approval_is_one_record_written_before_the_change(audited):
    doctor, log = audited
    assistant = Assistant(doctor)
    request = assistant.ask("fix the EFA security group", "s").approval
    assistant.resume("s", Approval(plan_digest=request.plan_digest, approver="alice", channel="tui"))
    assert [r["event"] for r in decisions(log)] == ["approval"]
    events = [r["event"] for r in log.read()]
    assert events.index("approval") < events.index("apply")


def test_a_tool_the_gate_refuses_is_recorded(audited, monkeypatch):
    doctor, log = audited
    monkeypatch.setattr(agent_module, "interrupt_config", lambda tools: {})  # as if the model slipped past
    model = scripted(call("apply_fix", plan_digest="f" * 64), call("delete_cluster", cluster="x"), "Done.")
    Assistant(doctor, model=model).ask("apply it", "s")
    reasons = [r["reason"] for r in decisions(log)]
    assert any("no person approved" in r for r in reasons)
    assert any("does not allow" in r for r in reasons)
