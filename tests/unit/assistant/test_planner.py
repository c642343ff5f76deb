"""The offline planner: intents from plain words, plans over whatever checks are installed, and its answers."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from fmdoctor.assistant.compose import compose
from fmdoctor.assistant.intents import classify, fix_target, plan_for
from fmdoctor.assistant.planner import OfflinePlanner, Toolbox, next_message
from fmdoctor.assistant.results import ToolResult, ToolStatus

EFA = ("efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached", "efa-missing-interfaces", "placement-group")
TODAY = {"check_efa": EFA}
LATER = {**TODAY, "check_network": ("ssh-unreachable", "fsx-unreachable", "s3-unreachable", "efa-peer-unreachable"),
         "check_spot": ("spot-interruption", "spot-rebalance", "spot-interruption-unprotected"),
         "check_checkpoint": ("checkpoint-stale", "checkpoint-missing", "checkpoint-incomplete"),
         "check_gpu": ("gpu-idle", "gpu-straggler", "gpu-memory-pressure", "gpu-metrics-missing", "efa-errors")}
TOOLS = {"check_all", "list_findings", *TODAY}


@pytest.mark.parametrize(
    "question, intents, fix",
    [
        ("is my cluster healthy", [], False),
        ("anything broken on llm-train?", [], False),
        ("why can't I ssh to the head node", ["ssh"], False),
        ("I can't log into the login node", ["ssh"], False),
        ("connection to the head node is refused", ["ssh"], False),
        ("why is training slow", ["slow"], False),
        ("NCCL all-reduce hangs", ["slow"], False),
        ("our tokens/s dropped by half", ["slow"], False),
        ("will I lose work if spot reclaims", ["spot"], False),
        ("if AWS takes back my nodes is progress lost?", ["spot"], False),
        ("what happens when a preemption hits?", ["spot"], False),
        ("fix the EFA security group", ["efa"], True),
        ("please repair the SG", ["efa"], True),
        ("are checkpoints being written?", ["checkpoint"], False),
        ("is the inference endpoint meeting its p99 latency?", ["inference"], False),
        ("are any HyperPod nodes unhealthy", ["hyperpod"], False),
        ("is EFA configured correctly?", ["efa"], False),  # 'correctly' is not 'fix'
    ],
)
def test_intents(question, intents, fix):
    found, wants_fix = classify(question)
    assert [i.name for i in found] == intents
    assert wants_fix is fix


def test_plan_uses_only_installed_checks_and_falls_back_to_the_full_run():
    slow = plan_for("why is training slow", TODAY, TOOLS)
    assert slow.calls == [("check_efa", {})] and not slow.full_run
    spot = plan_for("will I lose work if spot reclaims", TODAY, TOOLS)
    assert spot.calls == [("check_all", {})] and spot.full_run and [i.name for i in spot.missing] == ["spot"]
    vague = plan_for("hello?", TODAY, TOOLS)
    assert vague.calls == [("check_all", {})]


def test_plan_picks_up_families_added_later():
    spot = plan_for("will I lose work if spot reclaims", LATER, TOOLS | set(LATER))
    assert spot.calls == [("check_spot", {}), ("check_checkpoint", {})]
    ssh = plan_for("why can't I ssh to the head node", LATER, TOOLS | set(LATER) | {"why_not"})
    assert ssh.calls == [("check_network", {"checks": ["ssh-unreachable"]}),
                         ("why_not", {"source": "admin", "destination": "head", "port": 22, "protocol": "tcp"})]
    slow = plan_for("why is training slow", LATER, TOOLS | set(LATER))
    assert slow.calls == [("check_gpu", {}), ("check_efa", {}),
                          ("check_network", {"checks": ["efa-peer-unreachable", "fsx-unreachable"]})]


def test_follow_up_questions_use_earlier_findings():
    assert plan_for("which nodes are affected?", TODAY, TOOLS, earlier_findings=True).calls == [("list_findings", {})]
    assert plan_for("which nodes are affected?", TODAY, TOOLS, earlier_findings=False).calls == [("check_all", {})]


def _finding(check, resource, severity="critical", fix=None):
    return {"id": f"{check}/{resource}", "check": check, "resource": resource, "severity": severity,
            "summary": f"{check} on {resource}.", "runbook": check, "evidence": {"fix": fix} if fix else {}}


def test_fix_target_prefers_the_named_topic_and_fixable_findings():
    sg = _finding("efa-sg-self-reference", "sg-1", fix=[{"action": "authorize-security-group-egress"}])
    subnet = _finding("efa-subnet-spread", "subnet-1")
    nacl = _finding("nacl-blocks", "acl-1", "warning", fix=[{"action": "create-network-acl-entry"}])
    assert fix_target("fix the EFA security group", [subnet, nacl, sg]) is sg
    assert fix_target("fix it", [nacl, subnet]) is nacl
    assert fix_target("fix it", [subnet]) is None
    assert fix_target("how do I fix the subnet spread by hand?", [sg, subnet], fixable=False) is subnet


def _tool_message(result: ToolResult, call_id: str) -> ToolMessage:
    return ToolMessage(content=result.content(), artifact=result.artifact(), tool_call_id=call_id, name=result.tool)


def test_planner_is_a_chat_model_that_calls_bound_tools():
    from fmdoctor.assistant.tools import check_tools
    from fmdoctor.engine.registry import default_registry

    bound = OfflinePlanner().bind_tools(check_tools(default_registry()))
    message = bound.invoke([HumanMessage("why is training slow?")])
    assert "check_efa" in [c["name"] for c in message.tool_calls]
    assert bound.invoke([HumanMessage("is my cluster healthy?")]).tool_calls[0]["name"] == "check_all"
    assert OfflinePlanner().invoke([HumanMessage("hi")]).content.startswith("I cannot answer that")


def test_planner_answers_from_results_it_can_only_read_as_text():
    """With no artifact (e.g. history restored from elsewhere) the delimited JSON content is enough."""
    finding = _finding("efa-not-attached", "i-0abc")
    result = ToolResult(tool="check_efa", status=ToolStatus.SUCCESS, findings=[finding],
                        checks_run=["efa-not-attached"], data={"cluster": "c1"})
    text_only = ToolMessage(content=result.content(), tool_call_id="c1", name="check_efa")
    messages = [HumanMessage("which nodes lack EFA?"), AIMessage("", tool_calls=[
        {"name": "check_efa", "args": {}, "id": "c1", "type": "tool_call"}]), text_only]
    spec = {"name": "check_efa", "parameters": {"properties": {"checks": {"enum": list(EFA)}}}}
    toolbox = Toolbox([{"function": spec}])
    answer = next_message(messages, toolbox).content
    assert answer.startswith("1 finding concerns the EFA network.")
    assert "- [critical] efa-not-attached/i-0abc: efa-not-attached on i-0abc. (runbook: efa-not-attached)" in answer


def test_compose_never_calls_unverified_parts_healthy():
    result = ToolResult(tool="check_all", status=ToolStatus.SUCCESS, checks_run=["placement-group"],
                        errors=[{"check": "efa-sg-self-reference", "code": "AccessDenied",
                                 "iam_action": "ec2:DescribeSecurityGroups", "unverified": "the EFA group rules"}],
                        data={"cluster": "c1"})
    text = compose("is my cluster healthy", plan_for("is my cluster healthy", TODAY, TOOLS), [result])
    assert text.startswith("No problem found on c1, but 1 part could not be verified, so I cannot call it healthy.")
    assert "- efa-sg-self-reference: AccessDenied, needs ec2:DescribeSecurityGroups" in text


def test_compose_says_healthy_only_when_everything_ran_clean():
    result = ToolResult(tool="check_all", status=ToolStatus.SUCCESS, checks_run=list(EFA), data={"cluster": "c1"})
    text = compose("is my cluster healthy", plan_for("is my cluster healthy", TODAY, TOOLS), [result])
    assert text.startswith("c1 is healthy: 5 checks ran and found nothing.")


def test_a_report_survives_the_trip_through_the_models_text():
    from datetime import UTC, datetime

    from fmdoctor.assistant.results import result_of
    from fmdoctor.engine.model import Finding, Report, RunStats, Severity, Status

    finding = Finding(check="efa-not-attached", severity=Severity.CRITICAL, resource="i-0abc", summary="No EFA.",
                      evidence={"instance": "i-0abc"}, runbook="efa-not-attached")
    report = Report(cluster="c1", region="us-west-2", generated_at=datetime.now(UTC), status=Status.CRITICAL,
                    findings=[finding], stats=RunStats(checks_run=["efa-not-attached"]))
    result = ToolResult.from_report("check_efa", report)
    back = result_of(ToolMessage(content=result.content(), tool_call_id="x", name="check_efa"))
    assert back is not None and back.status is ToolStatus.SUCCESS  # the report's own status does not mask it
    assert back.finding_ids == ["efa-not-attached/i-0abc"] and back.findings[0]["resource"] == "i-0abc"
    assert back.checks_run == ["efa-not-attached"] and back.data["report_status"] == "critical"
