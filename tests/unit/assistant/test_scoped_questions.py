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
    assert out["answer"].startswith(f"gpu-node-3 ({node}) has 3 findings on it")
    assert "minutes of work will be lost" in out["answer"]
    on = {f["check"] for f in out["findings"] if f["resource"] == node}
    assert on == {"spot-interruption", "spot-interruption-unprotected", "gpu-idle"}
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
