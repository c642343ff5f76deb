"""The real langchain-openai client path, end to end, against a loopback OpenAI-compatible server.

The server (:mod:`fmdoctor.loopback_models`) speaks ``POST /v1/chat/completions`` (JSON and server-sent-event
streaming with the usage chunk, as vLLM and OpenAI do): asked a question it calls ``check_efa``; given the tool
result it answers citing the finding id it read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from fmdoctor.assistant import Assistant
from fmdoctor.assistant.backends import Backends
from fmdoctor.assistant.providers import ModelError
from fmdoctor.assistant.safety import undelimit
from fmdoctor.config import AgentSettings
from fmdoctor.loopback_models import Conversation, LoopbackModel, Reply

KEY = "sk-test-loopback-key-0123456789"
FINDING = re.compile(r"efa-sg-self-reference/sg-[0-9a-f]+")


def efa_brain(conversation: Conversation) -> Reply:
    """The 'model': call check_efa for a question, answer from the tool output once it has it."""
    last = conversation.messages[-1]
    if last.role == "tool":
        cited = FINDING.search(last.text)
        return Reply(f"EFA is blocked: {cited.group(0) if cited else 'nothing found'} (see runbook).")
    return Reply(tool_calls=[("check_efa", {"checks": ["efa-sg-self-reference"]})])


@pytest.fixture
def stub() -> Iterator[LoopbackModel]:
    with LoopbackModel("openai", efa_brain) as server:
        yield server


@pytest.fixture
def settings(stub, monkeypatch) -> AgentSettings:
    monkeypatch.setenv("STUB_OPENAI_API_KEY", KEY)
    return AgentSettings(model="openai:gpt-test", base_url=stub.url, api_key_env="STUB_OPENAI_API_KEY")


def test_openai_client_path_end_to_end(sg_fault_cluster, doctor_for, stub, settings):
    group = sg_fault_cluster.groups["efa"]
    assistant = Assistant(doctor_for(), settings=settings, backends=Backends())
    answer = assistant.ask("is EFA healthy? (my key is AKIAIOSFODNN7EXAMPLE)")

    assert answer.answer == f"EFA is blocked: efa-sg-self-reference/{group} (see runbook)."
    assert answer.citations == [f"efa-sg-self-reference/{group}"]
    assert [(c.name, c.status, c.finding_count) for c in answer.tool_calls] == [("check_efa", "success", 1)]
    assert answer.model == "openai-chat:gpt-test"

    first, second = stub.requests()
    assert first["model"] == "gpt-test" and first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}  # asked for usage although the base URL is custom
    assert [t["function"]["name"] for t in first["tools"]] == assistant.tool_names
    assert stub.exchanges[0].headers["authorization"] == f"Bearer {KEY}"
    assert first["messages"][0]["role"] == "system" and "Cite every factual claim" in first["messages"][0]["content"]
    assert "AKIAIOSFODNN7EXAMPLE" not in json.dumps(stub.requests())  # redacted before it left
    tool = second["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == first_call_id(stub)
    assert tool["content"].startswith('<tool_output tool="check_efa" nonce="')
    assert f"critical | efa-sg-self-reference/{group} | " in undelimit(tool["content"])
    # tokens are the provider's numbers (the usage chunk), not an estimate
    assert answer.usage == {"input_tokens": sum(e.input_tokens for e in stub.exchanges),
                            "output_tokens": sum(e.output_tokens for e in stub.exchanges),
                            "total_tokens": sum(e.input_tokens + e.output_tokens for e in stub.exchanges),
                            "model_calls": 2, "source": "provider"}


def first_call_id(stub: LoopbackModel) -> str:
    return next(m["tool_call_id"] for m in stub.requests()[1]["messages"] if m["role"] == "tool")


def test_a_provider_error_is_a_clear_message_without_the_key(sg_fault_cluster, doctor_for, stub, settings):
    stub.status = 401
    assistant = Assistant(doctor_for(), settings=settings.model_copy(update={"timeout_s": 5}), backends=Backends())
    with pytest.raises(ModelError) as raised:
        assistant.ask("is EFA healthy?")
    assert raised.value.exit_code == 3
    assert "AuthenticationError" in raised.value.message and KEY not in str(raised.value)
