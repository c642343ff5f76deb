"""Each provider's real client library (langchain-openai, langchain-ollama, langchain-aws), built by fmdoctor's
provider code, against a loopback server speaking that provider's protocol (:mod:`fmdoctor.loopback_models`):
the findings reach the model, secrets do not, answers stream, and tokens are the provider's numbers."""

from __future__ import annotations

import pytest

from fmdoctor.assistant import Assistant
from fmdoctor.assistant.backends import Backends
from fmdoctor.config import AgentSettings
from fmdoctor.loopback_models import LoopbackModel, planner_brain

PROVIDERS = [("openai", "openai:loopback-model"), ("ollama", "ollama:loopback-model"),
             ("bedrock", "bedrock_converse:amazon.nova-pro-v1:0")]
STREAMED = {"openai": "/v1/chat/completions", "ollama": "/api/chat",
            "bedrock": "/model/amazon.nova-pro-v1%3A0/converse-stream"}


@pytest.mark.parametrize("protocol, spec", PROVIDERS)
def test_each_providers_client_carries_the_findings_and_the_usage(sg_fault_cluster, doctor_for, protocol, spec):
    group = sg_fault_cluster.groups["efa"]
    with LoopbackModel(protocol, planner_brain) as server:
        settings = AgentSettings(model=spec, base_url=server.url, region="us-west-2")
        answer = Assistant(doctor_for(), settings=settings, backends=Backends()).ask(
            "is EFA healthy? (key AKIAIOSFODNN7EXAMPLE)")
    exchanges = server.exchanges
    sent = "".join(e.body for e in exchanges)
    # the inventory is asked which names the question holds, then the EFA checks run, then the answer
    assert [c.name for c in answer.tool_calls] == ["find_names", "check_efa"] and len(exchanges) == 3
    assert f"efa-sg-self-reference/{group}" in answer.citations
    assert answer.findings and all(f"| {f['id']} |" in sent for f in answer.findings)  # every finding, one line
    assert "AKIAIOSFODNN7EXAMPLE" not in sent  # redacted before it left
    assert [e.path for e in exchanges] == [STREAMED[protocol]] * 3 and all(e.stream for e in exchanges)
    assert answer.usage == {"input_tokens": sum(e.input_tokens for e in exchanges),
                            "output_tokens": sum(e.output_tokens for e in exchanges),
                            "total_tokens": sum(e.input_tokens + e.output_tokens for e in exchanges),
                            "model_calls": 3, "source": "provider"}
