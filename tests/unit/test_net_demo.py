"""The demo's network story (one SSH, one FSx and one S3 fault) and the runbooks rendering its findings."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

import fmdoctor
from fmdoctor.config import Settings
from fmdoctor.demo.builders import ClusterBuilder, acl_entry
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import CheckError, Finding
from fmdoctor.engine.registry import default_registry
from fmdoctor.runbooks.render import commands

RUNBOOKS = Path(fmdoctor.__file__).resolve().parent.parent / "runbooks"
NETWORK_CHECKS = ["ssh-unreachable", "fsx-unreachable", "s3-unreachable", "efa-peer-unreachable"]


@pytest.fixture(scope="module")
def demo_findings(demo_check) -> tuple[dict, list[Finding], list[CheckError]]:
    findings, errors = demo_check.of(NETWORK_CHECKS)
    return demo_check.facts, findings, errors


def test_demo_has_one_ssh_one_fsx_and_one_s3_fault(demo_findings):
    facts, findings, errors = demo_findings
    assert errors == []
    by_check = {}
    for finding in findings:
        by_check.setdefault(finding.check, []).append(finding)
    [ssh] = by_check["ssh-unreachable"]
    assert ssh.resource == facts["nodes"]["head-node"]
    assert ssh.evidence["code"] == "sg-ingress-no-match"
    assert ssh.evidence["blocking_resource"] == facts["groups"]["demo-head"]
    assert ssh.evidence["admin_cidrs_blocked"] == ["203.0.113.0/24"]
    [fsx] = by_check["fsx-unreachable"]
    assert fsx.resource == facts["fsx"]["id"]
    assert fsx.evidence["blocking_resource"] == facts["fsx"]["security_group"]
    assert {(f["from_port"], f["to_port"]) for f in fsx.evidence["fix"]} == {(1018, 1023)}
    assert fsx.evidence["directions_blocked"] == ["node -> file system"]
    # private-b kept the VPC's main route table (local route only): its Spot node has no way to S3.
    [s3] = by_check["s3-unreachable"]
    assert s3.evidence["code"] == "no-route"
    assert s3.evidence["nodes"] == [f"gpu-node-6 ({facts['nodes']['gpu-node-6']})"]
    # The EFA group's missing egress self-rule (the engine issue's fault) shows up pairwise too.
    [efa] = by_check["efa-peer-unreachable"]
    assert efa.resource == facts["groups"]["demo-efa"] and efa.evidence["code"] == "sg-egress-no-match"


def _front_matter(path: Path) -> tuple[dict, str]:
    _, head, body = path.read_text(encoding="utf-8").split("---\n", 2)
    return yaml.safe_load(head), body


def _render(body: str, finding: Finding) -> str:
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    template = env.from_string(body)
    return template.render(finding=finding, evidence=finding.evidence, cluster="demo-llm-train", region="us-west-2",
                           **commands(False))


@pytest.mark.parametrize("check_id", NETWORK_CHECKS)
def test_runbook_front_matter_matches_the_check(check_id):
    meta, body = _front_matter(RUNBOOKS / f"{check_id}.md")
    check = default_registry().get(check_id)
    assert meta["id"] == check.runbook_id() and meta["checks"] == [check_id]
    assert meta["severity"] == check.severity.value
    for section in ("## What it means", "## Confirm by hand", "## Fix", "## Verify"):
        assert section in body


def test_runbooks_render_the_demo_findings_with_their_real_values(demo_findings):
    _, findings, _ = demo_findings
    for finding in findings:
        _, body = _front_matter(RUNBOOKS / f"{finding.runbook}.md")
        text = _render(body, finding)
        assert finding.evidence["blocking_resource"] in text
        assert "aws ec2" in text and "fmdoctor check --cluster demo-llm-train" in text


def test_runbooks_render_acl_and_route_blockers(builder: ClusterBuilder):
    """The other branches of the runbooks: a network ACL on the reply, and a subnet with no way to S3."""
    b = builder
    b.internet_gateway(["public-a"])
    b.security_group("head", ingress=[{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                                       "IpRanges": [{"CidrIp": "203.0.113.0/24"}]}])
    b.launch(["head"], "m5.large", "public-a", ["head"], role="head", public_ip=True)
    b.launch(["gpu-1"], "m5.large", "private-a", ["head"])
    acl = b.network_acl(["public-a"], [acl_entry(100, False, "-1", "allow", "0.0.0.0/0")])
    settings = Settings.model_validate({"clusters": {"test-cluster": {"network": {"admin_cidrs": ["203.0.113.0/24"]}}}})
    report = Doctor(settings=settings, connection=Connection(region="us-west-2")).check(
        "test-cluster", only=["ssh-unreachable", "s3-unreachable"])
    codes = {(f.check, f.evidence["code"]) for f in report.findings}
    assert ("ssh-unreachable", "nacl-deny") in codes and ("s3-unreachable", "no-route") in codes
    for finding in report.findings:
        _, body = _front_matter(RUNBOOKS / f"{finding.runbook}.md")
        text = _render(body, finding)
        if finding.evidence["code"] == "nacl-deny":
            assert f"--network-acl-id {acl}" in text and "--egress" in text
        else:
            assert "create-vpc-endpoint" in text
