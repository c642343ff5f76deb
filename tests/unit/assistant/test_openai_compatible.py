"""The real langchain-openai client path, end to end, against a loopback OpenAI-compatible server.

The stub speaks ``POST /v1/chat/completions`` (JSON and server-sent-event streaming, as vLLM and OpenAI do):
asked a question it calls ``check_efa``; given the tool result it answers citing the finding id it read.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fmdoctor.assistant import Assistant
from fmdoctor.assistant.backends import Backends
from fmdoctor.assistant.providers import ModelError
from fmdoctor.assistant.safety import undelimit
from fmdoctor.config import AgentSettings

KEY = "sk-test-loopback-key-0123456789"
FINDING = re.compile(r"efa-sg-self-reference/sg-[0-9a-f]+")


class Stub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The 'model': call check_efa for a question, answer from the tool output once it has it."""
        last = body["messages"][-1]
        if last["role"] == "tool":
            cited = FINDING.search(last["content"])
            return {"content": f"EFA is blocked: {cited.group(0) if cited else 'nothing found'} (see runbook)."}
        arguments = json.dumps({"checks": ["efa-sg-self-reference"]})
        return {"content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                 "function": {"name": "check_efa", "arguments": arguments}}]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(body)
                stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path != "/v1/chat/completions" or stub.status != 200:
                    self._send(stub.status if stub.status != 200 else 404,
                               {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
                    return
                message = stub.reply(body)
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                if body.get("stream"):
                    self._stream(message, finish, body["model"])
                else:
                    self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                                     "model": body["model"], "choices": [
                                         {"index": 0, "message": {"role": "assistant", **message},
                                          "finish_reason": finish}],
                                     "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict[str, Any], finish: str, model: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for delta in _deltas(message):
                    self._event({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model,
                                 "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
                self._event({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": model,
                             "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, payload: dict[str, Any]) -> None:
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                self.wfile.flush()

        return Handler


def _deltas(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if message.get("tool_calls"):
        yield {"role": "assistant", "content": None,
               "tool_calls": [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]}
        return
    words = message["content"].split(" ")
    for i, word in enumerate(words):
        yield {"role": "assistant", "content": word + (" " if i < len(words) - 1 else "")}


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    yield server
    server.server.shutdown()


@pytest.fixture
def settings(stub, monkeypatch) -> AgentSettings:
    monkeypatch.setenv("STUB_OPENAI_KEY", KEY)
    return AgentSettings(model="openai:gpt-test", base_url=stub.url, api_key_env="STUB_OPENAI_KEY")


def test_openai_client_path_end_to_end(sg_fault_cluster, doctor_for, stub, settings):
    group = sg_fault_cluster.groups["efa"]
    assistant = Assistant(doctor_for(), settings=settings, backends=Backends())
    answer = assistant.ask("is EFA healthy? (my key is AKIAIOSFODNN7EXAMPLE)")

    assert answer.answer == f"EFA is blocked: efa-sg-self-reference/{group} (see runbook)."
    assert answer.citations == [f"efa-sg-self-reference/{group}"]
    assert [(c.name, c.status, c.finding_count) for c in answer.tool_calls] == [("check_efa", "success", 1)]
    assert answer.model == "openai-chat:gpt-test"

    first, second = stub.requests
    assert first["model"] == "gpt-test" and first["stream"] is True
    assert [t["function"]["name"] for t in first["tools"]] == assistant.tool_names
    assert stub.headers[0]["authorization"] == f"Bearer {KEY}"
    assert first["messages"][0]["role"] == "system" and "Cite every factual claim" in first["messages"][0]["content"]
    assert "AKIAIOSFODNN7EXAMPLE" not in json.dumps(stub.requests)  # redacted before it left
    tool = second["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1"
    assert tool["content"].startswith('<tool_output tool="check_efa" nonce="')
    assert json.loads(undelimit(tool["content"]))["findings"][0]["id"] == f"efa-sg-self-reference/{group}"


def test_a_provider_error_is_a_clear_message_without_the_key(sg_fault_cluster, doctor_for, stub, settings):
    stub.status = 401
    assistant = Assistant(doctor_for(), settings=settings.model_copy(update={"timeout_s": 5}), backends=Backends())
    with pytest.raises(ModelError) as raised:
        assistant.ask("is EFA healthy?")
    assert raised.value.exit_code == 3
    assert "AuthenticationError" in raised.value.message and KEY not in str(raised.value)
