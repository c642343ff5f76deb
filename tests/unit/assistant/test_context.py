"""What the model is sent: every finding as one line within the limit, nothing dropped silently, the whole
evidence on request, earlier questions shortened, and tokens counted from the provider's numbers."""

from __future__ import annotations

import json
import re

import anyio
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from mcp import Client

from fmdoctor.assistant import Assistant
from fmdoctor.assistant.backends import Backends
from fmdoctor.assistant.digest import EVIDENCE_CHARS, EVIDENCE_PREFIX, SEVERITY_ORDER, parse
from fmdoctor.assistant.results import DEFAULT_CONTENT_LIMIT, ToolResult
from fmdoctor.assistant.safety import undelimit
from fmdoctor.assistant.session import AssistantContext, SessionState
from fmdoctor.config import AgentSettings, Settings
from fmdoctor.demo.scenario import DEMO_CLUSTER, DEMO_REGION
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.mcp.server import build_server
from fmdoctor.mcp.service import McpService

from .conftest import call, scripted

LINE = re.compile(r"^(critical|warning|info) \| (\S+) \| ", re.M)


def unverified(text: str) -> list[tuple[str, str]]:
    """What could not be verified, as a model reads it from the text (one line may name several checks)."""
    return sorted((e["check"], e["code"]) for e in parse(text.splitlines())["errors"])


def _tool(assistant: Assistant, name: str):
    return next(t for t in assistant.tools if t.name == name).func


def _runtime(ctx: AssistantContext):
    return type("R", (), {"context": ctx, "stream_writer": staticmethod(lambda x: None)})()


@pytest.fixture(scope="module")
def demo_run(demo_check):
    """The demo's report, and a doctor for its cluster, for the tests that only read the report (and page through
    it); moto is gone, so a test that reached AWS would fail, not read a stale world."""
    settings = Settings.model_validate({"clusters": {DEMO_CLUSTER: {}}})
    return Doctor(settings=settings, connection=Connection(region=DEMO_REGION)), demo_check.report


@pytest.fixture
def demo_report(demo_run):
    return demo_run[1]


def test_every_demo_finding_is_one_line_worst_first_within_the_default_limit(demo_report):
    text = undelimit(ToolResult.from_report("check_all", demo_report).content())
    named = LINE.findall(text)
    assert sorted(i for _, i in named) == sorted(f.id for f in demo_report.findings) and len(named) >= 25
    ranks = [SEVERITY_ORDER[s] for s, _ in named]
    assert ranks == sorted(ranks)  # worst first
    count = len(demo_report.findings)
    assert text.startswith(f"success: {count} findings (") and f"findings (all {count}, worst first" in text
    assert len(text) <= DEFAULT_CONTENT_LIMIT
    assert unverified(text) == sorted((e.check, e.code) for e in demo_report.errors)
    digests = [line for line in text.splitlines() if line.startswith(EVIDENCE_PREFIX)]
    assert digests and all(len(line) <= len(EVIDENCE_PREFIX) + EVIDENCE_CHARS for line in digests)


def test_paging_with_list_findings_names_every_finding(demo_run):
    demo_doctor, demo_report = demo_run
    limit = 1500
    first = undelimit(ToolResult.from_report("check_all", demo_report).content(limit))
    seen = [i for _, i in LINE.findall(first)]
    settings = AgentSettings(max_tool_output_chars=limit)
    ctx = AssistantContext(demo_doctor, DEMO_CLUSTER, SessionState("s"), settings)
    ctx.session.remember(demo_report)
    list_findings = _tool(Assistant(demo_doctor, backends=Backends()), "list_findings")
    while (left := re.search(r"list_findings\(offset=(\d+)\) lists them", first)) is not None:
        assert int(left[1]) == len(seen)
        first, _ = list_findings(offset=int(left[1]), runtime=_runtime(ctx))
        seen += [i for _, i in LINE.findall(first)]
    assert sorted(seen) == sorted(f.id for f in demo_report.findings)  # each exactly once, none lost


def test_the_smallest_limit_still_says_what_could_not_be_verified_and_what_was_left_out(demo_report):
    text = undelimit(ToolResult.from_report("check_all", demo_report).content(500))
    assert unverified(text) == sorted((e.check, e.code) for e in demo_report.errors)
    assert len(LINE.findall(text)) >= 1
    left = re.search(r"left out for lack of room: (\d+) more findings", text)
    assert left is not None and int(left[1]) == len(demo_report.findings) - len(LINE.findall(text))
    assert "evidence left out for lack of room; get_finding(id) gives it for one finding" in text


def test_get_finding_returns_the_whole_evidence(demo_doctor, demo_world):
    demo_report = demo_doctor.check(demo_world.cluster)
    biggest = max(demo_report.findings, key=lambda f: len(json.dumps(f.evidence)))
    assert len(json.dumps(biggest.evidence)) > EVIDENCE_CHARS  # more than the digest shows
    get_finding = _tool(Assistant(demo_doctor, backends=Backends()), "get_finding")
    ctx = AssistantContext(demo_doctor, demo_world.cluster, SessionState("s"))
    content, artifact = get_finding(id=biggest.id, runtime=_runtime(ctx))  # nothing ran yet: runs its check
    assert artifact["status"] == "success" and artifact["data"]["evidence"] == biggest.evidence
    body = undelimit(content)
    shown = json.loads(body[body.index("data: ") + len("data: "):].splitlines()[0])
    assert shown["evidence"] == json.loads(json.dumps(biggest.evidence))
    content, artifact = get_finding(id=f"{biggest.check}/nothing-here", runtime=_runtime(ctx))
    assert artifact["status"] == "no_data" and biggest.id in artifact["message"]  # names what it did find


def test_earlier_results_reach_the_model_as_their_summary_line(sg_fault_cluster, doctor_for):
    group = sg_fault_cluster.groups["efa"]
    model = scripted(call("check_efa", "first"), f"Blocked: efa-sg-self-reference/{group}.",
                     call("check_efa", "second", checks=["efa-not-attached"]), "Nothing else.")
    assistant = Assistant(doctor_for(), model=model, backends=Backends())
    assistant.ask("is EFA ok?", "s")
    assistant.ask("and the nodes' interfaces?", "s")
    earlier, current = [m for m in model.received[-1] if isinstance(m, ToolMessage)]
    summary = undelimit(earlier.content).splitlines()
    ran = len(earlier.artifact["checks_run"])
    assert summary == [f"success: 2 findings (2 critical) from {ran} checks",
                       "(an earlier question's result, shortened: list_findings or get_finding(id) for details)"]
    assert "efa-not-attached" in undelimit(current.content)  # this question's result goes whole
    assert f"efa-sg-self-reference/{group}" in undelimit(model.received[1][-1].content)  # and went whole before


def test_tokens_are_the_providers_numbers_else_an_estimate(sg_fault_cluster, doctor_for):
    first = call("check_efa")
    first.usage_metadata = {"input_tokens": 900, "output_tokens": 20, "total_tokens": 920}
    answer = AIMessage("EFA is blocked.", usage_metadata={"input_tokens": 1500, "output_tokens": 8,
                                                          "total_tokens": 1508})
    reported = Assistant(doctor_for(), model=scripted(first, answer), backends=Backends()).ask("EFA?")
    assert reported.usage == {"input_tokens": 2400, "output_tokens": 28, "total_tokens": 2428, "model_calls": 2,
                              "source": "provider"}
    estimated = Assistant(doctor_for(), model=scripted(call("check_efa"), "EFA is blocked."),
                          backends=Backends()).ask("EFA?")
    assert estimated.usage["source"] == "estimate" and estimated.usage["model_calls"] == 2
    assert estimated.usage["input_tokens"] > 1000  # system prompt, tool specs and the result, at 4 characters each
    assert reported.to_json_dict()["usage"] == reported.usage  # in fmdoctor ask --format json


def test_mcp_check_text_is_the_same_format_and_structured_content_the_whole_report(efa_egress_fault):
    service = McpService(Doctor(connection=Connection(region="us-west-2")), cluster="test-cluster")

    async def main():
        async with Client(build_server(service)) as client:
            return await client.call_tool("check", {"only": ["efa-sg-self-reference"]})

    result = anyio.run(main)
    report = result.structured_content
    assert [f["id"] for f in report["findings"]] == [f"efa-sg-self-reference/{efa_egress_fault}"]
    assert report["findings"][0]["evidence"]["security_group"] == efa_egress_fault  # whole evidence, as before
    text = result.content[0].text
    assert text.startswith("success: 1 finding (1 critical) from 1 checks\ncluster: test-cluster (us-west-2)")
    assert f"critical | efa-sg-self-reference/{efa_egress_fault} | " in text
    assert "this result's structured content (findings[].evidence)" in text  # where the rest of the evidence is


def test_a_result_read_from_its_text_alone_keeps_what_a_remote_model_could_act_on(demo_report):
    """Over the wire a model has only the text: findings, what could not be verified, that a fix exists,
    and a tool's data (propose_fix's digest) must all be readable from it."""
    from fmdoctor.assistant.results import ToolStatus, result_of

    whole = ToolResult.from_report("check_all", demo_report)
    back = result_of(ToolMessage(whole.content(), tool_call_id="x", name="check_all"))
    assert back is not None and back.finding_ids == whole.finding_ids
    assert sorted((e["check"], e["code"]) for e in back.errors) == sorted((e.check, e.code) for e in demo_report.errors)
    fixable = {f.id for f in demo_report.findings if f.evidence.get("fix")}
    assert fixable and {f["id"] for f in back.findings if f["evidence"].get("fix")} == fixable
    proposed = ToolResult(tool="propose_fix", status=ToolStatus.APPROVAL_REQUIRED, message="plan 0f1e needs approval",
                          data={"digest": "0f1e2d3c", "check_id": "efa-sg-self-reference"})
    read = result_of(ToolMessage(proposed.content(), tool_call_id="y", name="propose_fix"))
    assert read is not None and read.data["digest"] == "0f1e2d3c" and read.status is ToolStatus.APPROVAL_REQUIRED


def test_one_gap_seen_by_several_checks_is_one_line_naming_each(demo_report):
    """The node without GPU metrics is a gap for every GPU check: one line names each check and what it
    could not judge, so the always-kept "not verified" part stays short."""
    text = undelimit(ToolResult.from_report("check_all", demo_report).content())
    tail = text[text.index("not verified ("):].splitlines()[1:]
    gap = [line for line in tail if "NoMetrics; not verified for each: " in line]
    assert len(gap) == 1 and "gpu-idle (GPU idleness), gpu-straggler (GPU straggler detection)" in gap[0]
    assert unverified(text) == sorted((e.check, e.code) for e in demo_report.errors)
    assert len([line for line in tail if ": No" in line]) < len(demo_report.errors)
