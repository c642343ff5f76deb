"""`fmdoctor fix` and `fmdoctor ask` ask a person in one dialogue: the same plan on stdout (parameters as JSON),
the same question on stderr, the same accepted answers; read back from moto whether the rule was added."""

from __future__ import annotations

import io
import sys

import pytest

import fmdoctor.cli.ask_cmd as ask_cmd
from fmdoctor.cli.main import main

REGION = "us-west-2"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def egress_peers(ec2, group: str) -> list[str]:
    [found] = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"]
    return [pair["GroupId"] for rule in found["IpPermissionsEgress"] if rule["IpProtocol"] == "-1"
            for pair in rule.get("UserIdGroupPairs", [])]


@pytest.mark.parametrize("reply, applied", [("y\n", True), ("yes\n", True), ("\n", False), ("no\n", False)])
@pytest.mark.parametrize("command", ["fix", "ask"])
def test_fix_and_ask_share_one_confirmation(command, reply, applied, builder, efa_egress_fault, capsys,
                                            monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", Terminal(reply))
    monkeypatch.setattr(ask_cmd, "_interactive", lambda: True)  # capsys' stdout is no terminal
    target = ["--cluster", builder.cluster, "--region", REGION]
    argv = (["fix", *target, "--check", "efa-sg-self-reference", "--audit-log", str(tmp_path / "audit.jsonl")]
            if command == "fix" else ["ask", *target, "fix the EFA security group", "--no-progress"])
    main(argv)
    out, err = capsys.readouterr()
    assert f"Apply 1 API call to {builder.cluster} ({REGION}, account 123456789012)? [y/N]" in err
    assert "fmdoctor fix: efa-sg-self-reference" in out and f"in {builder.cluster} ({REGION}, account" in out
    assert "  1. ec2 AuthorizeSecurityGroupEgress: allow all traffic out of" in out
    assert f'"GroupId": "{efa_egress_fault}"' in out and "{'GroupId'" not in out  # JSON, never a Python dict
    assert "AuthorizeSecurityGroupEgress: allowed: DryRun" in out  # the pre-flight, as fix prints it
    assert (egress_peers(builder.ec2, efa_egress_fault) == [efa_egress_fault]) is applied
