"""The inference runbooks: front matter in the shared format, and bodies that render for every finding.

Rendered by the product's renderer (fmdoctor.runbooks: sandboxed Jinja2, StrictUndefined), against the real
findings of a target where every inference check fails, and with no finding at all (the template view).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import fmdoctor
from fmdoctor.demo.endpoint_builder import publish_node_metric, samples
from fmdoctor.engine.registry import default_registry
from fmdoctor.runbooks import get_runbook

INFERENCE_IDS = [c.id for c in default_registry().select(["inference"])]
RUNBOOKS = Path(fmdoctor.__file__).resolve().parent.parent / "runbooks"
pytestmark = pytest.mark.skipif(not RUNBOOKS.is_dir(), reason="needs the source tree")


def split(check_id: str) -> tuple[dict, str]:
    text = (RUNBOOKS / f"{check_id}.md").read_text(encoding="utf-8")
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


def render(runbook_id: str, finding=None, cluster: str = "serving", region: str = "us-west-2") -> str:
    return get_runbook(runbook_id).render(finding, cluster=cluster, region=region)


@pytest.mark.parametrize("check_id", INFERENCE_IDS)
def test_front_matter_and_sections(check_id):
    front, body = split(check_id)
    check = default_registry().get(check_id)
    assert front["id"] == check.runbook_id() == check_id
    assert check_id in front["checks"]
    assert front["severity"] == check.severity.value
    assert front["remediation_iam_actions"] == []  # the fixes are manual: nothing here mutates
    assert [line for line in body.splitlines() if line.startswith("## ")] == [
        "## What it means", "## Confirm by hand", "## Fix", "## Verify"]
    assert "<" not in render(check_id).replace("<-", "")  # no <placeholder> even without a finding


def test_every_inference_finding_renders_its_runbook(builder, endpoints, endpoint_state, infer, at, aws):
    endpoints.endpoint("broken", "ml.g4dn.xlarge")
    endpoint_state("broken", "Failed", "CannotStartContainerError: exec format error")
    endpoints.endpoint("chat", "ml.g4dn.12xlarge", instances=4)
    endpoints.autoscale("chat", 1, 4)
    endpoints.traffic("chat", at, model_latency_us=samples(1_600_000, 3_200_000), invocations=100, errors_5xx=9,
                      gpu_utilization=372, gpu_memory_utilization=100)
    endpoints.endpoint("idle", "ml.g4dn.xlarge")
    builder.cluster = "serving"
    builder.security_group("serve")
    [slow, quiet] = builder.launch(["slow", "quiet"], "g5.xlarge", "private-a", ["serve"], role="inference")
    cw = aws.client("cloudwatch")
    publish_node_metric(cw, "LLM", "Latency", slow, at, samples(900, 1500, 40))
    publish_node_metric(cw, "CWAgent", "nvidia_smi_utilization_gpu", slow, at, [97])
    publish_node_metric(cw, "CWAgent", "nvidia_smi_utilization_gpu", quiet, at, [0])
    report = infer(INFERENCE_IDS, inference={"latency_metric": "LLM/Latency"})
    assert {f.check for f in report.findings} == set(INFERENCE_IDS)
    for finding in report.findings:
        text = render(finding.runbook, finding)
        assert finding.evidence.get("endpoint", finding.resource) in text, finding.check
        assert "None" not in text, (finding.check, text)



def test_async_and_serverless_findings_render_their_runbooks(endpoints, infer, at):
    """The other kinds' findings carry other evidence (a queue, InvocationsProcessed, cold starts, concurrency)."""
    endpoints.endpoint("jobs", "ml.g4dn.xlarge", instances=2, async_output="s3://serving-async/out/")
    endpoints.autoscale("jobs", min_capacity=0, max_capacity=2, backlog_per_instance=5)
    endpoints.async_traffic("jobs", at, backlog=[10, 14, 20, 26, 31, 38, 44, 50, 57, 63],
                            oldest_age_s=[600 + 60 * m for m in range(10)], processed=50, failures=5)
    endpoints.endpoint("spare-jobs", "ml.g4dn.xlarge", async_output="s3://serving-async/out/")
    endpoints.async_traffic("spare-jobs", at, backlog=[0] * 10, oldest_age_s=[0] * 10)
    endpoints.serverless("classifier", max_concurrency=4)
    endpoints.serverless_traffic("classifier", at, invocations=200, model_latency_us=samples(900_000, 1_500_000),
                                 model_setup_us={50_000_000: 2}, concurrency_utilization=1.0)
    report = infer(INFERENCE_IDS)
    kinds_found = {(f.check, f.evidence["endpoint_kind"]) for f in report.findings}
    assert kinds_found == {("inference-latency-slo", "async"), ("inference-errors", "async"),
                           ("autoscaling-at-max", "async"), ("inference-idle", "async"),
                           ("inference-latency-slo", "serverless"), ("accelerator-saturation", "serverless")}
    for finding in report.findings:
        text = render(finding.runbook, finding)
        assert finding.evidence["endpoint"] in text, finding.check
        assert "None" not in text, (finding.check, text)
