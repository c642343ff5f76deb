"""A question that names another cluster than the conversation's is never answered about this one: "is gpu-node-2 of
cluster prod-train healthy?" asked of llm-train would otherwise answer about llm-train's gpu-node-2, another node.
The guard every front end's assistant shares (ask, the TUI, Slack, serve) answers before any tool or model call,
for the offline planner and a provider's model alike."""

from __future__ import annotations

import json

import pytest

from fmdoctor.assistant import Assistant
from fmdoctor.cli.main import main
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor

from .conftest import REGION, call, scripted


def doctor() -> Doctor:
    clusters = {"llm-train": {}, "prod-train": {}, "hp": {"hyperpod": {"cluster_name": "ml-hp-1"}}}
    settings = Settings.model_validate({"region": REGION, "clusters": clusters})
    return Doctor(settings=settings, connection=Connection(region=REGION))


@pytest.mark.parametrize("question, cluster, said", [
    ("is gpu-node-2 of cluster prod-train healthy?", "llm-train", "fmdoctor ask --cluster prod-train"),
    ("why is the prod-train cluster slow?", "llm-train", "fmdoctor ask --cluster prod-train"),
    ("how is prod-train doing", "llm-train", "fmdoctor ask --cluster prod-train"),  # a configured name, bare
    ("is cluster staging-9 healthy?", "llm-train", "configured for no cluster staging-9"),
    ("is the ml-hp-1 cluster healthy?", "llm-train", "configured for no cluster ml-hp-1"),  # hp's, not llm-train's
    ("on prod-train, is gpu-node-2 ok?", "llm-train", "fmdoctor ask --cluster prod-train"),
    ("PROD-TRAIN's gpu-node-2?", "llm-train", "fmdoctor ask --cluster prod-train"),
    ("is https://console.aws.amazon.com/eks/home#/clusters/prod-train ok?", "llm-train", "--cluster prod-train"),
    ("is arn:aws:eks:us-west-2:1:cluster/eks-b healthy?", "llm-train", "configured for no cluster eks-b"),
    ("is the llm-train-2 cluster ok?", "llm-train", "configured for no cluster llm-train-2"),  # not a typo
])
def test_another_clusters_question_is_not_answered_about_this_one(question, cluster, said):
    model = scripted(call("check_all"), "should never be asked")
    answer = Assistant(doctor(), cluster, model=model).ask(question)
    assert answer.tool_calls == [] and model.received == []  # neither a tool nor the model ran
    assert f"I can only see cluster {cluster}" in answer.answer and said in answer.answer, answer.answer


@pytest.mark.parametrize("question, cluster", [
    ("is gpu-node-2 of cluster llm-train healthy?", "llm-train"),  # its own name
    ("is the ml-hp-1 cluster healthy?", "hp"),  # its HyperPod cluster's name is its own
    ("is my cluster healthy?", "llm-train"),
    ("is the p5 cluster slow?", "llm-train"),  # an instance family, not a name
    ("is our 16-node cluster in us-west-2 ok?", "llm-train"),
    ("is the cluster llm-trian healthy?", "llm-train"),  # its own name mistyped
    ("is the training cluster healthy?", "llm-train"),
    ("is the 8xH100 cluster on EKS-1.29 cluster ok? and my 2nd cluster?", "llm-train"),
    ("is the cluster 10.0.1.12 slow, cluster i-0abc1234?", "llm-train"),  # a node, not a cluster
])
def test_a_question_about_this_cluster_goes_on(question, cluster):
    model = scripted("Nothing to check.")
    answer = Assistant(doctor(), cluster, model=model).ask(question)
    assert len(model.received) == 1 and answer.answer == "Nothing to check.", answer.answer


def test_a_cluster_named_in_quoted_data_is_no_question_about_it():
    """serve asks about an alert with the alert quoted as data; the alert's own labels may name its EKS cluster,
    which is not what the person (here: serve) asked about."""
    from fmdoctor.assistant.safety import delimit

    model = scripted("The EFA security group blocks the job.")
    alert = delimit("alert", "NCCLHang on cluster eks-prod-1 (job llama)")
    answer = Assistant(doctor(), "llm-train", model=model).ask(f"An alert fired on this cluster. Explain it.\n{alert}")
    assert len(model.received) == 1 and answer.answer == "The EFA security group blocks the job."


@pytest.mark.usefixtures("one_demo_per_module")
def test_the_demo_says_it_has_one_cluster(capsys):
    assert main(["ask", "--demo", "--format", "json", "is gpu-node-2 of cluster prod-train healthy?"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["tool_calls"] == [] and answer["findings"] == []
    assert "I can only see cluster demo-llm-train" in answer["answer"]
    assert "The demo has only cluster demo-llm-train" in answer["answer"]


@pytest.mark.usefixtures("one_demo_per_module")
def test_the_demos_own_hyperpod_cluster_is_this_cluster(capsys):
    """The demo's HyperPod cluster (demo-llm-hyperpod) is demo-llm-train's own: neither refused nor taken for a
    mistyped resource name ('I cannot answer about demo-llm-hyperpod ... did you mean demo-llm-chat?')."""
    assert main(["ask", "--demo", "--format", "json", "is the demo-llm-hyperpod cluster healthy?"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["tool_calls"] and "I can only see" not in answer["answer"]
    assert "cannot answer about demo-llm-hyperpod" not in answer["answer"], answer["answer"]
    assert all(c.get("args", {}).get("resource") != "demo-llm-hyperpod" for c in answer["tool_calls"])
