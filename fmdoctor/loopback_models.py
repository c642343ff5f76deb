"""Loopback model servers for tests and benchmarks: each speaks one provider's wire protocol on 127.0.0.1,
so the provider's real client library (langchain-openai, langchain-ollama, langchain-aws) runs unchanged
(the protocols, with their sources, are in :mod:`fmdoctor.model_wire`).

What the "model" says is a :data:`Brain`: a function from the request, read into a provider-neutral
:class:`Conversation`, to a :class:`Reply` (text, or tool calls). Every request is recorded as an
:class:`Exchange`: its bytes, the tokens reported back, and the server's own time, so a benchmark can
subtract the server from what it measures (tokens by :func:`~fmdoctor.model_wire.count_tokens`, an estimate).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fmdoctor.loopback import KeepAliveHandler, serve_in_background
from fmdoctor.model_wire import (
    PROTOCOLS,
    Brain,
    Conversation,
    Message,
    Reply,
    count_tokens,
    event_frame,
    route,
    write_bedrock,
    write_ollama,
    write_openai,
)

__all__ = ["Brain", "Conversation", "Exchange", "LoopbackModel", "Message", "Reply", "count_tokens", "event_frame",
           "planner_brain"]


@dataclass
class Exchange:
    protocol: str
    path: str
    stream: bool
    request_bytes: int
    response_bytes: int
    input_tokens: int
    output_tokens: int
    server_s: float  # time in the handler: reading, thinking, writing
    label: str = ""
    body: str = ""  # the request as sent
    headers: dict[str, str] = field(default_factory=dict)  # lower-cased names


class LoopbackModel:
    """One server on 127.0.0.1 (an ephemeral port) speaking ``protocol``; ``label`` tags the exchanges."""

    def __init__(self, protocol: str, brain: Brain, status: int = 200):
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}")
        self.protocol, self.brain, self.status = protocol, brain, status
        self.exchanges: list[Exchange] = []
        self.label = ""
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{port}" + ("/v1" if protocol == "openai" else "")
        serve_in_background(self.server)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> LoopbackModel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def record(self, exchange: Exchange) -> None:
        with self._lock:
            exchange.label = self.label
            self.exchanges.append(exchange)

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(e.body) for e in self.exchanges]


def _handler(owner: LoopbackModel) -> type[BaseHTTPRequestHandler]:
    class Handler(KeepAliveHandler):
        def handle(self) -> None:
            with contextlib.suppress(ConnectionError):  # a client closed a kept-alive connection between requests
                super().handle()

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            started = time.perf_counter()
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.sent = 0
            body = json.loads(raw or b"{}")
            routed = route(owner.protocol, self.path.split("?", 1)[0], body)
            if routed is None or owner.status != 200:
                status = 404 if routed is None else owner.status
                self.send_json(status, {"error": {"message": "invalid api key" if routed else "not found",
                                                  "type": "invalid_request_error"}, "message": "rejected"})
                return
            conversation, stream = routed
            reply = owner.brain(conversation)
            spoken = reply.text + "".join(n + json.dumps(a) for n, a in reply.tool_calls)
            usage = (count_tokens(json.dumps(body)), max(count_tokens(spoken), 1))
            if owner.protocol == "openai":
                write_openai(self, body, reply, usage)
            elif owner.protocol == "ollama":
                write_ollama(self, body, reply, usage)
            else:
                write_bedrock(self, stream, reply, usage)
            if self.chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            owner.record(Exchange(owner.protocol, self.path, stream, len(raw), self.sent, usage[0], usage[1],
                                  time.perf_counter() - started, body=raw.decode(),
                                  headers={k.lower(): v for k, v in self.headers.items()}))

        def send_json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.chunked = False
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.sent = len(data)

        def start(self, status: int, content_type: str) -> None:
            self.chunked = True
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def write(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            self.sent += len(data)

    return Handler


def planner_brain(conversation: Conversation) -> Reply:
    """A model scripted to call the tools a question needs: fmdoctor's offline planner, reading only what
    went over the wire (the tool specs and the tool results' text), as a remote model must."""
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

    from fmdoctor.assistant.planner import Toolbox, next_message

    messages: list[BaseMessage] = []
    names: dict[str, str] = {}
    pending: list[str] = []  # the last assistant message's calls, in order (Ollama's carry no ids)
    for m in conversation.messages:
        if m.role == "user":
            messages.append(HumanMessage(m.text))
        elif m.role == "assistant":
            names.update({c["id"]: c["name"] for c in m.tool_calls if c["id"]})
            pending = [c["name"] for c in m.tool_calls]
            messages.append(AIMessage(m.text, tool_calls=[{"name": c["name"], "args": c["args"], "id": c["id"],
                                                           "type": "tool_call"} for c in m.tool_calls]))
        elif m.role == "tool":
            name = names.get(m.tool_call_id) or (pending.pop(0) if pending else None)
            messages.append(ToolMessage(m.text, tool_call_id=m.tool_call_id, name=name))
    decided = next_message(messages, Toolbox(conversation.tools))
    return Reply(str(decided.content), [(c["name"], c["args"]) for c in decided.tool_calls])
