"""``fmdoctor fix`` and ``fmdoctor iam-policy`` in-process: approval gate, dry-run, exit codes, audit log."""

from __future__ import annotations

import functools
import io
import json

import pytest

from fmdoctor.cli.main import main
from fmdoctor.engine.api import Doctor
from fmdoctor.remediation.audit import AuditLog

CHECK = "efa-sg-self-reference"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def fix(capsys, monkeypatch, tmp_path):
    log = tmp_path / "audit.jsonl"

    def run(*extra, stdin=""):
        monkeypatch.setattr("sys.stdin", stdin if isinstance(stdin, io.StringIO) else io.StringIO(stdin))
        code = main(["fix", "--cluster", "test-cluster", "--region", "us-west-2", "--check", CHECK,
                     "--audit-log", str(log), *extra])
        out, err = capsys.readouterr()
        return code, out, err

    run.log = AuditLog(log)
    return run


def state(ec2, group):
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])["SecurityGroupRules"]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rules)


def test_without_yes_and_without_a_terminal_it_refuses_with_exit_3(builder, efa_egress_fault, fix):
    before = state(builder.ec2, efa_egress_fault)
    code, out, err = fix()
    assert code == 3
    assert "no terminal to ask on" in err and "--yes" in err and "Traceback" not in err
    assert "AuthorizeSecurityGroupEgress" in out  # the plan was shown first
    assert state(builder.ec2, efa_egress_fault) == before
    assert [e["event"] for e in fix.log.read()] == ["plan", "preflight", "approval-refused"]


def test_dry_run_prints_the_plan_and_changes_nothing(builder, efa_egress_fault, fix):
    before = state(builder.ec2, efa_egress_fault)
    code, out, _ = fix("--dry-run")
    assert code == 0
    assert f'"GroupId": "{efa_egress_fault}"' in out and "allowed: DryRun" in out and "nothing was changed" in out
    assert state(builder.ec2, efa_egress_fault) == before


def test_yes_applies_verifies_and_a_second_run_is_a_no_op(builder, efa_egress_fault, fix):
    code, out, _ = fix("--yes")
    assert code == 0, out
    assert "verify: verified" in out
    after = state(builder.ec2, efa_egress_fault)
    code, out, _ = fix("--yes")
    assert code == 0 and "nothing to fix" in out
    assert state(builder.ec2, efa_egress_fault) == after
    events = [e["event"] for e in fix.log.read()]
    assert events == ["plan", "preflight", "approval", "apply", "verify", "plan"]
    assert fix.log.read()[2]["approval"]["channel"] == "cli --yes"


def test_terminal_prompt_yes_and_no(builder, efa_egress_fault, fix):
    before = state(builder.ec2, efa_egress_fault)
    code, out, err = fix(stdin=Terminal("n\n"))
    assert code == 2 and "declined" in out and "[y/N]" in err
    assert state(builder.ec2, efa_egress_fault) == before
    code, out, _ = fix(stdin=Terminal("y\n"))
    assert code == 0 and "verify: verified" in out
    channels = [e.get("channel") or e.get("approval", {}).get("channel") for e in fix.log.read()
                if e["event"] in ("declined", "approval")]
    assert channels == ["terminal", "terminal"]


def test_denied_preflight_exits_2_naming_the_action(builder, efa_egress_fault, fix, faults, monkeypatch):
    faults.deny("ec2", "AuthorizeSecurityGroupEgress", code="UnauthorizedOperation")
    monkeypatch.setattr("fmdoctor.engine.api.Doctor",  # open_target imports it when it runs
                        functools.partial(Doctor, aws_factory=faults.aws_factory))
    before = state(builder.ec2, efa_egress_fault)
    code, out, _ = fix("--yes")
    assert code == 2
    assert "missing permission: ec2:AuthorizeSecurityGroupEgress" in out and "not applying" in out
    assert state(builder.ec2, efa_egress_fault) == before


def test_json_format_and_manual_only_findings(builder, fix, capsys):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    builder.launch(["gpu-2"], "p4d.24xlarge", "private-b", ["efa"], efa_interfaces=4)
    code = main(["fix", "--cluster", "test-cluster", "--region", "us-west-2", "--check", "efa-subnet-spread",
                 "--format", "json", "--audit-log", str(fix.log.path)])
    data = json.loads(capsys.readouterr().out)
    assert code == 2 and data["exit"] == 2
    assert data["plan"]["manual"][0]["runbook"] == "efa-subnet-spread" and data["plan"]["calls"] == []


def test_demo_fix_end_to_end_in_process(capsys, tmp_path):
    code = main(["fix", "--demo", "--check", CHECK, "--yes", "--format", "json", "--audit-log",
                 str(tmp_path / "a.jsonl")])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["result"]["verification"]["status"] == "verified"


def test_unknown_check_and_conflicting_flags_exit_3(capsys):
    assert main(["fix", "--cluster", "x", "--region", "us-west-2", "--check", "efa-sg-self-refrence"]) == 3
    assert "did you mean efa-sg-self-reference" in capsys.readouterr().err
    assert main(["fix", "--demo", "--check", CHECK, "--yes", "--dry-run"]) == 3
    assert "not allowed with argument" in capsys.readouterr().err


def test_iam_policy_groups_by_service_and_scopes_remediation(capsys):
    assert main(["iam-policy"]) == 0
    checks_only = json.loads(capsys.readouterr().out)
    by_sid = {s["Sid"]: s for s in checks_only["Statement"]}
    ec2 = by_sid["Ec2"]
    assert ec2["Resource"] == "*" and "ec2:DescribeSecurityGroupRules" in ec2["Action"]
    granted = [a for s in checks_only["Statement"] for a in s["Action"]]
    assert not any(a.startswith(("ec2:Authorize", "ec2:Create", "sagemaker:Batch")) for a in granted)

    assert main(["iam-policy", "--remediation"]) == 0
    policy = json.loads(capsys.readouterr().out)
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["Ec2SecurityGroup"] == {
        "Sid": "Ec2SecurityGroup", "Effect": "Allow", "Resource": "arn:aws:ec2:*:*:security-group/*",
        "Action": ["ec2:AuthorizeSecurityGroupEgress", "ec2:AuthorizeSecurityGroupIngress"]}
    assert policy["Version"] == "2012-10-17"

    assert main(["iam-policy", "--remediation", "--only", "efa-subnet-spread", "--partition", "aws-cn"]) == 0
    narrow = json.loads(capsys.readouterr().out)
    # The check reads subnets; discovering the cluster's instances and their details needs the other describes.
    assert narrow["Statement"] == [{"Sid": "Ec2", "Effect": "Allow", "Resource": "*",
                                    "Action": ["ec2:DescribeInstanceTypes", "ec2:DescribeInstances",
                                               "ec2:DescribeSecurityGroupRules", "ec2:DescribeSecurityGroups",
                                               "ec2:DescribeSubnets"]}]


def test_iam_policy_covers_every_remediation_a_runbook_declares():
    from fmdoctor.engine.registry import default_registry
    from fmdoctor.iam_policy import iam_policy
    from fmdoctor.remediation.actions import ACTIONS, SCHEDULER_SERVICES
    from fmdoctor.runbooks import list_runbooks

    runbooks = list_runbooks()
    policy, warnings = iam_policy(default_registry(), runbooks, remediation=True)
    granted = {a for s in policy["Statement"] for a in s["Action"]}
    mutating = {spec.iam_action for spec in ACTIONS.values()}
    in_scheduler = {spec.iam_action for spec in ACTIONS.values() if spec.service in SCHEDULER_SERVICES}
    for runbook in runbooks:
        assert set(runbook.remediation_iam_actions) <= mutating, runbook.id
        # a drain or cordon is a permission in Slurm or Kubernetes, never an IAM statement
        assert set(runbook.remediation_iam_actions) - in_scheduler <= granted, runbook.id
        assert not in_scheduler & granted
    assert warnings == []
