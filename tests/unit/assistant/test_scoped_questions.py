"""Questions that name a node, group, endpoint or bucket are answered about it: the names and paths the planner
reads, `ask --format json` about one node, and eval cases a cluster-wide answer fails."""

from __future__ import annotations

import json

import pytest

from fmdoctor.assistant.evaluation import load_cases, run_suite
from fmdoctor.assistant.intents import classify, plan_for
from fmdoctor.assistant.planner import OfflinePlanner
from fmdoctor.assistant.scope import named_things, path_question, without_names
from fmdoctor.cli.main import main

FAMILIES = {"check_gpu": ("gpu-idle", "gpu-straggler"), "check_efa": ("efa-sg-self-reference",),
            "check_checkpoint": ("checkpoint-stale",), "check_storage": ("s3-unreachable", "fsx-unreachable"),
            "check_network": ("ssh-unreachable",)}
TOOLS = {"check_all", "list_findings", "check_resource", "why_not", *FAMILIES}


@pytest.mark.parametrize("question, names", [
    ("what is wrong with gpu-node-3?", [("gpu-node-3", False)]),
    ("is the demo-llm-chat-canary endpoint healthy?", [("demo-llm-chat-canary", True)]),
    ("what is wrong with the bucket ckpts-2?", [("s3://ckpts-2", True)]),
    ("is s3://ckpts/run-1/ ok", [("s3://ckpts/run-1/", True)]),
    ("is i-0123456789abcdef0 or 10.0.16.4 slow?", [("i-0123456789abcdef0", True), ("10.0.16.4", True)]),
    ("what's wrong with ip-10-0-1-12.ec2.internal?", [("ip-10-0-1-12.ec2.internal", True)]),  # issue 36
    ("is ip-10-0-1-12 idle.", [("ip-10-0-1-12", True)]),
    ("is hyperpod-i-0123456789abcdef0 ok", [("hyperpod-i-0123456789abcdef0", True)]),
    ("why is training slow on p5.48xlarge, p99 up since step-002400?", []),  # types, percentiles, steps
    ("NCCL all-reduce hangs", []),
    ("is the inference endpoint healthy?", []),  # a kind word alone names nothing
])
def test_names_in_a_question(question, names):
    assert [(n.text, n.strong) for n in named_things(question)] == names


def test_a_name_is_not_a_topic():
    question = "what is wrong with gpu-node-3?"
    assert classify(question)[0][0].name == "gpu"  # read naively, 'gpu-node-3' is a GPU question
    assert classify(without_names(question, named_things(question)))[0] == []


@pytest.mark.parametrize("question, args", [
    ("can gpu-node-6 reach the head node on port 22?",
     {"source": "gpu-node-6", "destination": "head", "port": 22, "protocol": "tcp"}),
    ("can the head node reach gpu-node-1 on port 8080?",
     {"source": "head", "destination": "gpu-node-1", "port": 8080, "protocol": "tcp"}),
    ("can I ssh to 10.0.16.4 from 203.0.113.7", {"source": "203.0.113.7", "destination": "10.0.16.4", "port": 22,
                                                 "protocol": "tcp"}),
    ("can gpu-node-1 talk to gpu-node-2 over EFA?", {"source": "gpu-node-1", "destination": "gpu-node-2",
                                                     "protocol": "efa"}),
    ("can gpu-node-6 reach s3?", {"source": "gpu-node-6", "destination": "s3", "protocol": "tcp"}),
    ("what is wrong with gpu-node-3?", None),
])
def test_path_questions(question, args):
    assert path_question(question, named_things(question)) == args


def test_plans_for_named_things():
    node = plan_for("is gpu-node-3 idle?", FAMILIES, TOOLS)
    assert node.calls == [("check_resource", {"resource": "gpu-node-3", "checks": ["gpu-straggler", "gpu-idle"]})]
    assert node.unscoped == [("check_gpu", {})]  # what a weak name falls back to if the cluster lacks it
    path = plan_for("can gpu-node-6 reach the head node on port 22?", FAMILIES, TOOLS)
    assert path.calls == [("why_not", {"source": "gpu-node-6", "destination": "head", "port": 22,
                                       "protocol": "tcp"})]
    assert plan_for("why can't I ssh to the head node", FAMILIES, TOOLS).calls[-1][1]["source"] == "admin"
    head = plan_for("is the head node ok?", FAMILIES, TOOLS)
    assert head.calls == [("check_resource", {"resource": "head"})]
    fix = plan_for("fix the EFA security group of gpu-node-3", FAMILIES, TOOLS)
    assert not fix.scoped  # a fix picks its finding from the check's results


def test_ask_json_about_one_node_has_only_that_nodes_findings(capsys):
    assert main(["ask", "--demo", "what is wrong with gpu-node-3?", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in out["tool_calls"]] == ["find_names", "check_resource"]
    spot = next(f for f in out["findings"] if f["check"] == "spot-interruption-unprotected")
    node = spot["resource"]
    assert out["answer"].startswith(f"gpu-node-3 ({node}) has 4 findings on it")
    assert "minutes of work will be lost" in out["answer"]
    on = {f["check"] for f in out["findings"] if f["resource"] == node}
    assert on == {"spot-interruption", "spot-interruption-unprotected", "gpu-idle", "scheduler-schedules-faulty-node"}
    for finding in out["findings"]:  # the rest involve it: they name the node or sit on its group or subnet
        if finding["resource"] != node:
            assert node in finding["summary"] + json.dumps(finding["evidence"]) or \
                finding["resource"].startswith(("sg-", "subnet-")), finding["id"]
    assert not {"gpu-straggler", "efa-not-attached", "endpoint-unhealthy"} & {f["check"] for f in out["findings"]}


class ClusterWide(OfflinePlanner):
    """The planner without check_resource: what the cluster-wide answer to a named question looks like."""

    def bind_tools(self, tools, **kwargs):
        return super().bind_tools([t for t in tools if getattr(t, "name", "") != "check_resource"], **kwargs)


@pytest.mark.eval
def test_the_scoped_eval_cases_fail_a_cluster_wide_answer():
    cases = [c for c in load_cases() if "check_resource" in c.tools]
    assert {c.id.split("-")[0] for c in cases} == {"node", "endpoint", "bucket"}
    suite = run_suite(ClusterWide(), cases=cases)
    assert [r.case for r in suite.results if r.status != "fail"] == []


INFERENCE_SLOW = {"inference-latency-slo", "inference-errors", "accelerator-saturation", "autoscaling-at-max",
                  "endpoint-unhealthy"}


def _ask_json(capsys, question: str) -> dict:
    assert main(["ask", "--demo", question, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in out["tool_calls"]] == ["find_names", "check_resource"], out["tool_calls"]
    return out


def test_a_node_by_its_dns_name_runs_every_check_that_concerns_a_node_and_leads_with_its_incidents(capsys):
    out = _ask_json(capsys, "is ip-10-0-32-4.us-west-2.compute.internal healthy?")  # gpu-node-2's private DNS
    stalled = next(f for f in out["findings"] if f["check"] == "training-stalled")
    node = stalled["resource"]  # the culprit the stall names: the node asked about
    assert out["answer"].startswith(f"gpu-node-2 ({node}) has ")
    assert {"training-stalled", "capacity-block-expiring", "spot-interruption", "gpu-xid-metrics"} <= \
        set(out["checks_run"])
    assert not {"inference-latency-slo", "checkpoint-stale"} & set(out["checks_run"])
    first = out["answer"].split("\n", 1)[0]
    # the most urgent incident it is part of (the Capacity Block's deadline, then the stalled job), not the
    # warning on it
    assert "Most urgent" in first and "Capacity Block" in first and "gpu-memory-pressure" not in first
    listed = out["answer"].split("Incidents involving it, most urgent first:\n", 1)[1].splitlines()
    assert "Capacity Block" in listed[0] and "Training on demo-llm-train stalled" in listed[1]


@pytest.mark.parametrize("question", ["why is demo-llm-chat slow?", "why is the demo-llm-chat endpoint slow?"])
def test_slow_about_an_endpoint_means_its_latency_errors_saturation_and_scaling(capsys, question):
    out = _ask_json(capsys, question)
    assert set(out["checks_run"]) == INFERENCE_SLOW  # no training check
    assert out["answer"].startswith("endpoint demo-llm-chat has 3 findings on it concerning its latency, errors, "
                                    "saturation and scaling")
    assert {f["check"] for f in out["findings"]} == {"inference-latency-slo", "accelerator-saturation",
                                                     "autoscaling-at-max"}
    assert all(f["resource"].startswith("endpoint/demo-llm-chat/") for f in out["findings"])


@pytest.mark.parametrize("question, label, on, absent", [
    ("is demo-efa healthy?", "security group demo-efa (sg-", {"efa-sg-self-reference", "efa-peer-unreachable"},
     {"gpu-idle", "inference-errors"}),
    # pasted from a chat or a document: typographic quotes are not part of the name
    ("is “demo-efa” healthy?", "security group demo-efa (sg-", {"efa-sg-self-reference", "efa-peer-unreachable"},
     {"gpu-idle", "inference-errors"}),
    ("what is wrong with demo-llm-train-checkpoints?", "s3://demo-llm-train-checkpoints has",
     {"checkpoint-incomplete", "checkpoint-stale", "checkpoint-missing"}, {"fsx-unreachable", "gpu-idle"}),
    ("what is wrong with demo-llm-scratch?", "FSx file system demo-llm-scratch (fs-", {"fsx-unreachable"},
     {"gpu-idle", "checkpoint-stale", "efa-sg-self-reference"}),
    ("is run-0412 making progress?", "training job run-0412 has", {"checkpoint-incomplete", "checkpoint-stale"},
     {"checkpoint-missing", "inference-errors", "gpu-idle"}),
])
def test_each_kind_of_thing_is_answered_about_it(capsys, question, label, on, absent):
    out = _ask_json(capsys, question)
    assert out["answer"].startswith(label)
    checks = {f["check"] for f in out["findings"]}
    assert on <= checks and not absent & checks


@pytest.mark.parametrize("question", ["is gpu-node-2 or gpu-node-3 worse?", "is gpu-node-3 or gpu-node-2 worse?"])
def test_two_things_asked_about_are_answered_most_urgent_first(capsys, question):
    """gpu-node-3 is taken by Spot within minutes; gpu-node-2's Capacity Block ends in about 1h20m: whichever is
    named first, the answer opens with gpu-node-3 (it opened with the first named)."""
    assert main(["ask", "--demo", question, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in out["tool_calls"]] == ["find_names", "check_resource", "check_resource"]
    assert out["answer"].startswith("gpu-node-3 (")
    first = out["answer"].split("\n", 1)[0]
    assert "will be terminated by EC2 Spot" in first
    assert "\ngpu-node-2 (" in out["answer"]  # the other is still answered, after it


def test_a_mistyped_name_is_said_with_the_name_it_is_close_to(capsys):
    """'demo-llm-chatt' (no digit, no kind word) names nothing of the cluster: the answer says so and which name
    is close before answering for the whole cluster (it answered about training as if no name had been typed)."""
    assert main(["ask", "--demo", "is demo-llm-chatt slow?", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first = out["answer"].split("\n", 1)[0]
    assert first.startswith("'demo-llm-chatt' is not a node, group, endpoint")
    assert "did you mean demo-llm-chat?" in first
    assert first.endswith("so this answer is about the whole cluster.")


def test_a_jobs_answer_holds_its_stall_and_what_threatens_it(capsys):
    out = _ask_json(capsys, "is run-0412 making progress?")
    assert {"training-stalled", "capacity-block-expiring", "spot-interruption-unprotected"} <= \
        {f["check"] for f in out["findings"]}


def test_a_name_the_inventory_knows_is_planned_whatever_its_shape():
    from langchain_core.messages import HumanMessage

    from fmdoctor.assistant.intents import wants_names
    from fmdoctor.assistant.planner import FIND_NAMES, Toolbox, next_message
    from fmdoctor.assistant.scope import Named

    families = {**FAMILIES, "check_inference": tuple(sorted(INFERENCE_SLOW | {"inference-idle"}))}
    question = "why is chat slow?"  # a plain word: no shape says it is a name
    assert plan_for(question, families, TOOLS).calls[0][0] != "check_resource"
    chat = Named("chat", question.index("chat"), True, "endpoint")
    plan = plan_for(question, families, TOOLS, recognised=[chat])
    assert plan.calls == [("check_resource", {"resource": "chat", "checks": [
        "inference-latency-slo", "inference-errors", "accelerator-saturation", "autoscaling-at-max",
        "endpoint-unhealthy"]})]
    node = Named("chat", question.index("chat"), True, "node")  # 'slow' about a node: the training checks
    assert plan_for(question, families, TOOLS, recognised=[node]).calls[0][1]["checks"][0] == "gpu-straggler"
    # the inventory is asked whatever the words' shape: 'chat' and 'scratch' may be the cluster's names
    for plain in (question, "is scratch full?", "is my cluster healthy?", "why is demo-llm-chat slow?"):
        assert wants_names(plain)
        toolbox = Toolbox([{"name": n, "parameters": {}} for n in (*TOOLS, FIND_NAMES)])
        assert [c["name"] for c in next_message([HumanMessage(plain)], toolbox).tool_calls] == [FIND_NAMES]
    assert not wants_names("fix the security group") and not wants_names("how do I fix it by hand?")


def test_ask_about_a_node_by_its_ec2_hostname(demo_world, demo_doctor):
    """Issue 36: 'what's wrong with ip-10-0-1-12.ec2.internal?' is the node with that address, under any domain."""
    from fmdoctor.assistant import Assistant

    node = demo_world.launched_nodes()["gpu-node-3"]
    short = "ip-" + node.private_ip.replace(".", "-")
    answer = Assistant(demo_doctor).ask(f"what's wrong with {short}.ec2.internal?")
    assert [c.name for c in answer.tool_calls] == ["find_names", "check_resource"]
    assert answer.answer.startswith(f"gpu-node-3 ({node.id}) has ")
