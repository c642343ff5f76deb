"""`fmdoctor ask` and `fmdoctor eval` in-process: output shapes, exit codes, approvals at a terminal."""

from __future__ import annotations

import io
import json
import re
import sys
import types

import pytest

import fmdoctor.cli.ask_cmd as ask_cmd
from fmdoctor.assistant.backends import Backends
from fmdoctor.cli.main import main

from .conftest import FakeApproval

# End to end, so out of the fast tier (`pytest -m "not e2e"`): `fmdoctor ask` end to end: the command, the
# assistant and the fix path over seeded clusters.
pytestmark = pytest.mark.e2e



def test_ask_json_has_answer_tool_calls_and_findings(capsys):
    code = main(["ask", "--demo", "why is training slow?", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(out) >= {"answer", "tool_calls", "findings", "citations", "approval_required"}
    calls = {c["name"]: c for c in out["tool_calls"]}
    assert "check_efa" in calls and calls["check_efa"]["finding_count"] >= 5 and out["model"] == "offline"
    assert {f["id"] for f in out["findings"]} == set(out["citations"])
    assert {f["check"] for f in out["findings"]} >= {"efa-sg-self-reference", "efa-subnet-spread", "placement-group"}
    assert out["approval_required"] is None


def test_ask_text_prints_the_answer_and_tool_calls_on_stderr(capsys):
    assert main(["ask", "--demo", "is my cluster healthy"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("demo-llm-train is not healthy: ")
    assert re.search(r"fmdoctor: check_all\(\): success, \d+ findings \(\d+\.\ds\)", captured.err)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["ask", "--demo", "x", "--model", "gpt-4o"], "is not PROVIDER:MODEL"),
        (["ask", "--demo", "x", "--model", "bedrock_converse:anthropic.claude-3-haiku-20240307-v1:0"],
         "cannot be called from it"),
        (["ask", "x"], "no cluster given"),
        (["ask"], "the following arguments are required: question"),
    ],
)
def test_ask_bad_input_exits_3(capsys, argv, message):
    assert main(argv) == 3
    assert message in capsys.readouterr().err


def test_model_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("FMDOCTOR_MODEL", "nope:model")
    assert main(["ask", "--demo", "x"]) == 3
    assert "unsupported model provider 'nope'" in capsys.readouterr().err


@pytest.fixture
def with_remediation(monkeypatch, fix_backends):
    monkeypatch.setattr(Backends, "library", classmethod(lambda cls: fix_backends))
    module = types.ModuleType("fmdoctor.remediation")
    module.Approval = FakeApproval
    monkeypatch.setitem(sys.modules, "fmdoctor.remediation", module)


def test_without_a_terminal_the_plan_is_shown_and_nothing_changes(capsys, with_remediation, remediation):
    assert main(["ask", "--demo", "fix the EFA security group", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    plan = out["approval_required"]
    assert plan["check_id"] == "efa-sg-self-reference"
    assert plan["plan"]["calls"][0]["operation"] == "AuthorizeSecurityGroupEgress"
    assert remediation.applied == []


@pytest.mark.parametrize("reply, applied", [("yes\n", 1), ("y\n", 1), ("\n", 0), ("no\n", 0)])
def test_at_a_terminal_y_or_yes_applies(capsys, monkeypatch, with_remediation, remediation, reply, applied):
    monkeypatch.setattr(ask_cmd, "_interactive", lambda: True)
    monkeypatch.setattr(sys, "stdin", io.StringIO(reply))
    assert main(["ask", "--demo", "fix the EFA security group", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "Apply 1 API call" in err and err.rstrip().endswith("[y/N]")  # fmdoctor fix's question
    assert "AuthorizeSecurityGroupEgress" in out and "{'GroupId'" not in out  # the plan, its params as JSON
    assert len(remediation.applied) == applied
    if applied:
        approval = remediation.applied[0][1]
        assert approval.channel == "cli" and approval.plan_digest == remediation.applied[0][0].digest
        assert "Fix applied" in out
        assert remediation.decisions == []  # the approval is recorded by apply_fix itself
    else:
        assert "Not applied" in out
        [decision] = remediation.decisions  # answering anything but 'yes' is on the record
        assert decision["decision"] == "declined" and decision["plan_digest"]


def test_eval_command_prints_the_pass_rate(capsys):
    assert main(["eval", "--case", "health-healthy,fix-healthy,ssh-demo"]) == 0
    out, err = capsys.readouterr()
    progress = re.findall(r"^fmdoctor: \[(\d)/3\] ([\w-]+): pass \(\d+\.\ds\)$", err, re.M)
    assert sorted(progress) == [("1", "ssh-demo"), ("2", "health-healthy"), ("3", "fix-healthy")]  # as each ends
    assert {case: status for status, case in re.findall(r"^(PASS|FAIL|SKIP) +(\S+)", out, re.M)} == {
        "health-healthy": "PASS", "fix-healthy": "PASS", "ssh-demo": "PASS"}
    assert re.search(r"^offline +3/3 +100\.0% +0 ", out, re.M)
