"""The checkpoint, Spot, Capacity Block and HyperPod runbooks: front matter that matches the check, and bodies
that render (with the product's renderer: sandboxed Jinja2, StrictUndefined) from the demo's real findings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import fmdoctor
from fmdoctor.engine.registry import default_registry
from fmdoctor.runbooks import get_runbook

RUNBOOKS = Path(fmdoctor.__file__).resolve().parent.parent / "runbooks"
IDS = ["checkpoint-stale", "checkpoint-missing", "checkpoint-incomplete", "spot-interruption", "spot-rebalance",
       "spot-interruption-unprotected", "capacity-block-expiring", "hyperpod-node-unhealthy"]


def split(path: Path) -> tuple[dict, str]:
    _, front, body = path.read_text(encoding="utf-8").split("---\n", 2)
    return yaml.safe_load(front), body


@pytest.fixture(scope="module")
def demo_findings(demo_check):
    findings, _ = demo_check.of(["checkpoint", "spot", "capacity", "hyperpod"])
    return {f.check: f for f in findings}


@pytest.mark.parametrize("check_id", IDS)
def test_front_matter_matches_the_check(check_id):
    meta, body = split(RUNBOOKS / f"{check_id}.md")
    check = default_registry().get(check_id)
    assert meta["id"] == check.runbook_id() == check_id and meta["checks"] == [check_id]
    assert meta["severity"] == check.severity.value and isinstance(meta["remediation_iam_actions"], list)
    assert [line for line in body.splitlines() if line.startswith("## ")] == [
        "## What it means", "## Confirm by hand", "## Fix", "## Verify"]


def render(check_id, finding):
    return get_runbook(check_id).render(finding, cluster="demo-llm-train", region="us-west-2")


@pytest.mark.parametrize("check_id", [i for i in IDS if i != "checkpoint-missing"])
def test_runbook_renders_the_real_values(check_id, demo_findings):
    finding = demo_findings[check_id]
    text = render(check_id, finding)
    assert finding.evidence.get("instance", finding.evidence.get("node_id", finding.resource)) in text
    assert "<" not in text.replace("<!--", "")  # no placeholders left for a person to fill in


def test_missing_runbook_renders_for_s3_and_local():
    from fmdoctor.engine.model import Finding, Severity

    for listed, problem in (("s3://b/run/", "bucket b does not exist"), ("/fsx/ckpt/", None)):
        finding = Finding(check="checkpoint-missing", severity=Severity.WARNING, resource=listed, summary="x",
                          runbook="checkpoint-missing",
                          evidence={"location": listed, "listed": listed, "found_by": "x", "checkpoints_seen": 0,
                                    "problem": problem})
        assert listed in render("checkpoint-missing", finding)
