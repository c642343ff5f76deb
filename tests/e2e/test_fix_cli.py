"""``fmdoctor fix`` and ``fmdoctor runbook show`` as users run them: subprocess, HTTP, moto's server."""

from __future__ import annotations

import json

import pytest

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo

pytestmark = pytest.mark.e2e


def test_fix_over_http_refuses_without_yes_then_fixes_and_verifies(moto_server, fmdoctor_cli, tmp_path):
    world = seed_demo(moto_server.session())
    group = world.facts["groups"]["demo-efa"]
    log = tmp_path / "audit.jsonl"
    target = ["--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url", moto_server.url,
              "--check", "efa-sg-self-reference", "--audit-log", str(log)]

    refused = fmdoctor_cli("fix", *target)
    assert refused.code == 3 and "--yes" in refused.stderr and "Traceback" not in refused.stderr

    dry = fmdoctor_cli("fix", *target, "--dry-run", "--format", "json")
    assert dry.code == 0, dry.stderr
    [call] = dry.json()["plan"]["calls"]
    assert (call["operation"], call["params"]["GroupId"]) == ("AuthorizeSecurityGroupEgress", group)
    assert dry.json()["preflight"]["checks"][0]["status"] == "allowed"

    fixed = fmdoctor_cli("fix", *target, "--yes")
    assert fixed.code == 0, fixed.stdout + fixed.stderr
    assert "verify: verified" in fixed.stdout

    check = fmdoctor_cli("check", *target[:6], "--only", "efa-sg-self-reference", "--format", "json")
    assert check.code == 0 and check.json()["findings"] == []

    again = fmdoctor_cli("fix", *target, "--yes")
    assert again.code == 0 and "nothing to fix" in again.stdout

    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert events == ["plan", "preflight", "approval-refused", "plan", "preflight",
                      "plan", "preflight", "approval", "apply", "verify", "plan"]


def test_runbook_show_from_a_piped_check(moto_server, fmdoctor_cli):
    world = seed_demo(moto_server.session())
    report = fmdoctor_cli("check", "--cluster", DEMO_CLUSTER, "--region", "us-west-2", "--endpoint-url",
                          moto_server.url, "--format", "json", "--only", "efa-not-attached")
    shown = fmdoctor_cli("runbook", "show", "efa-not-attached", "--finding", "-", input=report.stdout)
    assert shown.code == 0, shown.stderr
    assert f"--instance-ids {world.facts['nodes']['gpu-node-5']}" in shown.stdout
