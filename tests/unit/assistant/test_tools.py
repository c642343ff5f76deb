"""Tools generated from the registry, and the adapters to the reachability and runbook contracts (faked)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from langchain_core.utils.function_calling import convert_to_openai_tool

from fmdoctor.assistant import Assistant
from fmdoctor.assistant.backends import Backends, to_plain
from fmdoctor.assistant.planner import Toolbox
from fmdoctor.assistant.tools import ACCESS, check_tools
from fmdoctor.checks import ALL_CHECKS
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.check import Check
from fmdoctor.engine.model import Severity
from fmdoctor.engine.registry import Registry, default_registry

from .conftest import CLUSTER, REGION


class GpuIdle(Check):
    """Every GPU node's GPUs were busy over the window (a stand-in with a fixed verdict, so the tool set is known)."""

    id = "gpu-idle"
    family = "gpu"
    severity = Severity.WARNING
    iam_actions = ("cloudwatch:GetMetricData",)

    def run(self, ctx):
        node = ctx.inventory.accelerated_nodes()[0]
        return [self.finding(node.id, f"{node.name} averaged 2% GPU utilization over 30m.", {"average": 2.0})]


def _registry() -> Registry:
    """Today's catalogue with a gpu-idle check standing in for (or replacing) the real one."""
    return Registry([*(c for c in ALL_CHECKS if c.id != GpuIdle.id), GpuIdle])


def test_one_tool_per_family_with_the_check_ids_in_its_schema():
    registry = _registry()
    tools = check_tools(registry)
    families: dict[str, list[str]] = {}
    for check in registry.select(None):
        families.setdefault(check.family, []).append(check.id)
    assert [t.name for t in tools] == [f"check_{f}" for f in families] + ["check_all", "list_findings",
                                                                         "get_finding"]
    specs = [convert_to_openai_tool(t) for t in tools]
    box = Toolbox(specs)
    assert box.families == {f"check_{f}": tuple(ids) for f, ids in families.items()}
    assert "gpu-idle" in box.families["check_gpu"] and "efa-sg-self-reference" in box.families["check_efa"]
    assert all(t.metadata[ACCESS] == "read" for t in tools)
    # Lean: each check id is written once (the enum), descriptions are one line, optional means no anyOf-null.
    text = json.dumps(specs)
    assert all(text.count(f'"{check_id}"') == 1 for ids in families.values() for check_id in ids)
    assert all("\n" not in s["function"]["description"] and "  " not in s["function"]["description"] for s in specs)
    assert '"null"' not in text


def test_a_family_added_later_is_used_for_its_questions(healthy_efa_cluster):
    settings = Settings.model_validate({"region": REGION, "clusters": {CLUSTER: {}}})
    doctor = Doctor(settings=settings, connection=Connection(region=REGION), registry=_registry())
    answer = Assistant(doctor, backends=Backends()).ask("are my GPUs sitting idle?")
    gpu_1 = healthy_efa_cluster.nodes["gpu-1"]
    assert [c.name for c in answer.tool_calls] == ["find_names", "check_gpu"]
    assert f"gpu-idle/{gpu_1}" in answer.answer and "gpu-idle" in answer.checks_run


def test_the_library_backends_are_the_package_functions_and_a_test_can_leave_tools_out():
    from fmdoctor.net.reachability import why_not
    from fmdoctor.remediation.apply import apply_fix
    from fmdoctor.remediation.audit import record_decision
    from fmdoctor.remediation.plan import plan_fix
    from fmdoctor.remediation.preflight import preflight
    from fmdoctor.runbooks import get_runbook

    library = Backends.library()
    assert (library.why_not, library.get_runbook, library.plan_fix, library.preflight, library.apply_fix,
            library.record_decision) == (why_not, get_runbook, plan_fix, preflight, apply_fix, record_decision)
    assert Backends().remediation is False
    doctor = Doctor(settings=Settings(), registry=default_registry())
    assert Assistant(doctor, "any").tool_names[-4:] == ["why_not", "get_runbook", "propose_fix", "apply_fix"]
    assert not {"why_not", "get_runbook", "propose_fix", "apply_fix"} & set(
        Assistant(doctor, "any", backends=Backends()).tool_names)
    full = Backends(why_not=lambda *a, **k: None, get_runbook=lambda *a, **k: None, plan_fix=lambda *a, **k: None,
                    apply_fix=lambda *a, **k: None)
    names = Assistant(doctor, "any", backends=full).tool_names
    assert names[-4:] == ["why_not", "get_runbook", "propose_fix", "apply_fix"]
    tools = {t.name: t.metadata[ACCESS] for t in Assistant(doctor, "any", backends=full).tools}
    assert [n for n, access in tools.items() if access != "read"] == ["apply_fix"]


@dataclass
class FakeReachability:
    reachable: bool
    source: str
    destination: str
    port: int
    protocol: str

    def to_json_dict(self) -> dict[str, Any]:
        blocked = None if self.reachable else {
            "code": "sg-ingress-no-match", "component": "security-group", "resource": "sg-0head",
            "rule": "tcp 22 from 203.0.113.0/24", "fix": [], "evidence": {}}
        return {"reachable": self.reachable, "source": self.source, "destination": self.destination,
                "protocol": self.protocol, "port": self.port, "hops": [{"component": "eni"}], "blocked_by": blocked}


def test_why_not_resolves_head_and_admin_and_explains_the_block(healthy_efa_cluster, doctor_for):
    asked = []

    def why_not(doctor, cluster, source, destination, port, protocol="tcp"):
        asked.append((cluster, source, destination, port, protocol))
        return FakeReachability(False, source, destination, port, protocol)

    doctor = doctor_for(network={"admin_cidrs": ["203.0.113.0/24"]})
    answer = Assistant(doctor, backends=Backends(why_not=why_not)).ask("why can't I ssh to the head node?")
    head = healthy_efa_cluster.nodes["head"]
    assert asked == [(CLUSTER, "203.0.113.0/24", head, 22, "tcp")]
    # The real ssh-unreachable check runs beside the (faked) trace; its finding heads the answer, the trace follows.
    assert answer.answer.startswith("1 finding concerns SSH to the head node.")
    assert (f"\n- sg-0head: tcp/22 from 203.0.113.0/24 to {head} is blocked by security-group sg-0head "
            "(sg-ingress-no-match); the rule that fixes it: tcp 22 from 203.0.113.0/24") in answer.answer
    assert answer.citations == [f"ssh-unreachable/{head}"]
    assert [c.name for c in answer.tool_calls] == ["find_names", "check_network", "why_not"]


def test_why_not_takes_name_tags_and_reports_a_missing_head(builder, doctor_for):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32)
    seen = []

    def why_not(doctor, cluster, source, destination, port, protocol="tcp"):
        seen.append((source, destination))
        return FakeReachability(True, source, destination, port, protocol)

    from fmdoctor.assistant.extra_tools import why_not_tool
    from fmdoctor.assistant.session import AssistantContext, SessionState

    tool = why_not_tool(Backends(why_not=why_not))
    ctx = AssistantContext(doctor_for(), CLUSTER, SessionState("s"))
    func = tool.func
    runtime = type("R", (), {"context": ctx, "stream_writer": staticmethod(lambda x: None)})()
    content, artifact = func(destination="gpu-1", port=988, source="internet", runtime=runtime)
    assert seen == [("internet", builder.nodes["gpu-1"])] and artifact["status"] == "success"
    content, artifact = func(destination="head", port=22, runtime=runtime)
    assert artifact["status"] == "error" and "no known head node" in artifact["message"]


def test_why_not_tool_asks_about_efa_without_a_port(builder, doctor_for):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=2)
    seen = []

    def why_not(doctor, cluster, source, destination, port, protocol="tcp"):
        seen.append((port, protocol))
        return FakeReachability(True, source, destination, port, protocol)

    from fmdoctor.assistant.extra_tools import WhyNotArgs, why_not_tool
    from fmdoctor.assistant.session import AssistantContext, SessionState

    assert WhyNotArgs(destination="gpu-2", source="gpu-1", protocol="efa").port is None
    ctx = AssistantContext(doctor_for(), CLUSTER, SessionState("s"))
    runtime = type("R", (), {"context": ctx, "stream_writer": staticmethod(lambda x: None)})()
    _, artifact = why_not_tool(Backends(why_not=why_not)).func(destination="gpu-2", source="gpu-1", protocol="efa",
                                                              runtime=runtime)
    assert seen == [(None, "efa")] and artifact["message"].startswith("efa from ")


class FakeRunbook:
    def __init__(self, runbook_id: str):
        self.id = runbook_id
        self.rendered: list[Any] = []

    def render(self, finding=None, cluster="", region="", demo=False):
        self.rendered.append(finding)
        group = finding.evidence["security_group"]
        return (f"## Fix\naws ec2 authorize-security-group-egress --group-id {group} "
                f"--ip-permissions IpProtocol=-1,UserIdGroupPairs=[{{GroupId={group}}}] --region {region}")


def test_runbook_is_rendered_from_the_finding(sg_fault_cluster, doctor_for):
    runbooks: dict[str, FakeRunbook] = {}

    def get_runbook(runbook_id, settings=None):
        return runbooks.setdefault(runbook_id, FakeRunbook(runbook_id))

    answer = Assistant(doctor_for(), backends=Backends(get_runbook=get_runbook)).ask(
        "how do I fix the EFA security group by hand?")
    group = sg_fault_cluster.groups["efa"]
    assert [c.name for c in answer.tool_calls] == ["check_efa", "get_runbook"]
    [finding] = runbooks["efa-sg-self-reference"].rendered
    assert finding.id == f"efa-sg-self-reference/{group}"
    assert f"aws ec2 authorize-security-group-egress --group-id {group}" in answer.answer
    assert f"--region {REGION}" in answer.answer


def test_list_findings_filters_what_this_conversation_found(demo_doctor, demo_world):
    assistant = Assistant(demo_doctor, backends=Backends())
    tool = next(t for t in assistant.tools if t.name == "list_findings")
    from fmdoctor.assistant.session import AssistantContext, SessionState

    ctx = AssistantContext(demo_doctor, demo_world.cluster, SessionState("s"))
    runtime = type("R", (), {"context": ctx})()
    truth = demo_doctor.check(demo_world.cluster).findings
    _, everything = tool.func(runtime=runtime)  # nothing ran yet: runs every check first
    assert "all checks just ran" in everything["message"]
    assert sorted(f["id"] for f in everything["findings"]) == sorted(f.id for f in truth)
    _, critical = tool.func(severity="critical", runtime=runtime)
    assert {f["id"] for f in critical["findings"]} == {f.id for f in truth if f.severity.value == "critical"}
    node = demo_world.facts["nodes"]["gpu-node-6"]
    _, one = tool.func(check="placement-group", resource=node[-6:], runtime=runtime)
    assert [f["id"] for f in one["findings"]] == [f"placement-group/{node}"]
    _, family = tool.func(check="efa", severity="warning", runtime=runtime)
    efa = {c.id for c in demo_doctor.registry if c.family == "efa"}
    assert {f["id"] for f in family["findings"]} == {f.id for f in truth if f.check in efa}


def test_to_plain_reads_the_contract_objects():
    assert to_plain(FakeReachability(True, "a", "b", 1, "tcp"))["reachable"] is True
    assert to_plain({"x": 1}) == {"x": 1} and to_plain(None) is None
    assert to_plain(Severity.CRITICAL) == "critical"
