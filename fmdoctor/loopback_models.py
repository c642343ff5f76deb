"""Loopback model servers for tests and benchmarks: each speaks one provider's wire protocol on 127.0.0.1,
so the provider's real client library (langchain-openai, langchain-ollama, langchain-aws) runs unchanged.

- ``openai``: ``POST /v1/chat/completions``, JSON or server-sent events; when the request sets
  ``stream_options.include_usage``, one more chunk before ``data: [DONE]`` with an empty ``choices`` and the
  ``usage`` (https://platform.openai.com/docs/api-reference/chat/streaming), as OpenAI and vLLM answer;
- ``ollama``: ``POST /api/chat``, one JSON object or NDJSON lines, the last with ``done: true``,
  ``prompt_eval_count`` and ``eval_count`` (https://github.com/ollama/ollama/blob/main/docs/api.md);
- ``bedrock``: ``POST /model/{modelId}/converse`` (JSON) and ``/converse-stream`` with the events messageStart,
  contentBlockStart/Delta/Stop, messageStop and metadata (usage)
  (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html), framed as
  ``application/vnd.amazon.eventstream`` messages: prelude (total and header lengths, CRC-32), string headers
  ``:event-type``/``:content-type``/``:message-type``, JSON payload, message CRC-32 (what botocore's
  ``botocore/eventstream.py`` decodes).

What the "model" says is a :data:`Brain`: a function from the request, read into a provider-neutral
:class:`Conversation`, to a :class:`Reply` (text, or tool calls). Every request is recorded as an
:class:`Exchange`: its bytes, the tokens reported back, and the server's own time, so a benchmark can
subtract the server from what it measures. Tokens are counted by :func:`count_tokens`, an estimate (one token
per word piece of up to 8 letters, digit group of up to 3, or pair of symbols, roughly how BPE tokenizers split
identifiers and JSON), not a real tokenizer.
"""

from __future__ import annotations

import binascii
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

_PIECE = re.compile(r"[A-Za-z]{1,8}|\d{1,3}|[^\sA-Za-z\d]{1,2}")


def count_tokens(text: str) -> int:
    return len(_PIECE.findall(text))


@dataclass
class Message:
    role: str  # system | user | assistant | tool
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, args}
    tool_call_id: str = ""


@dataclass
class Conversation:
    model: str
    messages: list[Message]
    tools: list[dict[str, Any]]  # OpenAI shape: {"type": "function", "function": {name, description, parameters}}

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


Brain = Callable[[Conversation], Reply]


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
        if protocol not in _PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}")
        self.protocol, self.brain, self.status = protocol, brain, status
        self.exchanges: list[Exchange] = []
        self.label = ""
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{port}" + ("/v1" if protocol == "openai" else "")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

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


# ---- reading requests -------------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _read_openai(body: dict[str, Any]) -> Conversation:
    messages = []
    for m in body.get("messages", []):
        calls = [{"id": c["id"], "name": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}")}
                 for c in m.get("tool_calls") or []]
        messages.append(Message(m["role"], _text_of(m.get("content")), calls, m.get("tool_call_id", "")))
    return Conversation(body.get("model", ""), messages, body.get("tools") or [])


def _read_ollama(body: dict[str, Any]) -> Conversation:
    messages = []
    for m in body.get("messages", []):
        calls = [{"id": c.get("id", ""), "name": c["function"]["name"], "args": c["function"].get("arguments") or {}}
                 for c in m.get("tool_calls") or []]
        messages.append(Message(m["role"], _text_of(m.get("content")), calls, m.get("tool_call_id", "")))
    return Conversation(body.get("model", ""), messages, body.get("tools") or [])


def _read_bedrock(body: dict[str, Any], model: str) -> Conversation:
    messages = [Message("system", "".join(s.get("text", "") for s in body.get("system") or []))]
    for m in body.get("messages", []):
        text, calls = "", []
        for block in m.get("content", []):
            if "text" in block:
                text += block["text"]
            elif "toolUse" in block:
                use = block["toolUse"]
                calls.append({"id": use["toolUseId"], "name": use["name"], "args": use.get("input") or {}})
            elif "toolResult" in block:
                result = block["toolResult"]
                parts = "".join(p.get("text", "") or json.dumps(p.get("json", "")) for p in result.get("content", []))
                messages.append(Message("tool", parts, tool_call_id=result["toolUseId"]))
        if text or calls:
            messages.append(Message(m["role"], text, calls))
    tools = [{"type": "function", "function": {"name": t["toolSpec"]["name"],
                                               "description": t["toolSpec"].get("description", ""),
                                               "parameters": t["toolSpec"]["inputSchema"]["json"]}}
             for t in (body.get("toolConfig") or {}).get("tools", []) if "toolSpec" in t]
    return Conversation(model, messages, tools)


# ---- writing replies --------------------------------------------------------------------------------------


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"id": f"call_{uuid.uuid4().hex[:12]}", "name": n, "args": a} for n, a in reply.tool_calls]


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def _openai(handler: Any, body: dict[str, Any], reply: Reply, usage: tuple[int, int]) -> None:
    calls = _calls(reply)
    wire_calls = [{"id": c["id"], "type": "function",
                   "function": {"name": c["name"], "arguments": json.dumps(c["args"])}} for c in calls]
    finish = "tool_calls" if calls else "stop"
    numbers = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    base = {"id": "chatcmpl-loopback", "created": int(time.time()), "model": body.get("model", "")}
    if not body.get("stream"):
        message = {"role": "assistant", "content": None if calls else reply.text} | (
            {"tool_calls": wire_calls} if calls else {})
        handler.send_json(200, base | {"object": "chat.completion", "usage": numbers, "choices": [
            {"index": 0, "message": message, "finish_reason": finish}]})
        return
    handler.start(200, "text/event-stream")
    chunk = base | {"object": "chat.completion.chunk"}
    deltas = ([{"role": "assistant", "content": None, "tool_calls": [{"index": i, **c} for i, c in
                                                                     enumerate(wire_calls)]}] if calls else
              [{"role": "assistant", "content": w} for w in _words(reply.text)])
    for delta in deltas:
        handler.write(f"data: {json.dumps(chunk | {'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode())
    handler.write(f"data: {json.dumps(chunk | {'choices': [{'index': 0, 'delta': {}, 'finish_reason': finish}]})}\n\n"
                  .encode())
    if (body.get("stream_options") or {}).get("include_usage"):
        handler.write(f"data: {json.dumps(chunk | {'choices': [], 'usage': numbers})}\n\n".encode())
    handler.write(b"data: [DONE]\n\n")


def _ollama(handler: Any, body: dict[str, Any], reply: Reply, usage: tuple[int, int]) -> None:
    calls = [{"function": {"name": c["name"], "arguments": c["args"]}} for c in _calls(reply)]
    created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    base = {"model": body.get("model", ""), "created_at": created}
    done = base | {"done": True, "done_reason": "stop", "total_duration": 1000, "load_duration": 10,
                   "prompt_eval_count": usage[0], "prompt_eval_duration": 100, "eval_count": usage[1],
                   "eval_duration": 500}
    message = {"role": "assistant", "content": "" if calls else reply.text} | ({"tool_calls": calls} if calls else {})
    if body.get("stream") is False:
        handler.send_json(200, done | {"message": message})
        return
    handler.start(200, "application/x-ndjson")
    parts = [message] if calls else [{"role": "assistant", "content": w} for w in _words(reply.text)]
    for part in parts:
        handler.write((json.dumps(base | {"message": part, "done": False}) + "\n").encode())
    handler.write((json.dumps(done | {"message": {"role": "assistant", "content": ""}}) + "\n").encode())


def event_frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """One message of the AWS event-stream encoding (what botocore's EventStreamBuffer decodes)."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        raw = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07" + len(raw).to_bytes(2, "big") + raw
    data = json.dumps(payload).encode()
    total = 12 + len(headers) + len(data) + 4
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    message = prelude + (binascii.crc32(prelude) & 0xFFFFFFFF).to_bytes(4, "big") + headers + data
    return message + (binascii.crc32(message) & 0xFFFFFFFF).to_bytes(4, "big")


def _bedrock_events(reply: Reply, usage: tuple[int, int]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "messageStart", {"role": "assistant"}
    calls = _calls(reply)
    for index, call in enumerate(calls):
        yield "contentBlockStart", {"contentBlockIndex": index, "start": {
            "toolUse": {"toolUseId": call["id"], "name": call["name"]}}}
        yield "contentBlockDelta", {"contentBlockIndex": index,
                                    "delta": {"toolUse": {"input": json.dumps(call["args"])}}}
        yield "contentBlockStop", {"contentBlockIndex": index}
    if not calls:
        for word in _words(reply.text):
            yield "contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": word}}
        yield "contentBlockStop", {"contentBlockIndex": 0}
    yield "messageStop", {"stopReason": "tool_use" if calls else "end_turn"}
    yield "metadata", {"usage": {"inputTokens": usage[0], "outputTokens": usage[1], "totalTokens": sum(usage)},
                       "metrics": {"latencyMs": 1}}


def _bedrock(handler: Any, stream: bool, reply: Reply, usage: tuple[int, int]) -> None:
    if stream:
        handler.start(200, "application/vnd.amazon.eventstream")
        for event_type, payload in _bedrock_events(reply, usage):
            handler.write(event_frame(event_type, payload))
        return
    calls = _calls(reply)
    content = ([{"toolUse": {"toolUseId": c["id"], "name": c["name"], "input": c["args"]}} for c in calls] if calls
               else [{"text": reply.text}])
    handler.send_json(200, {"output": {"message": {"role": "assistant", "content": content}},
                            "stopReason": "tool_use" if calls else "end_turn",
                            "usage": {"inputTokens": usage[0], "outputTokens": usage[1], "totalTokens": sum(usage)},
                            "metrics": {"latencyMs": 1}})


_PROTOCOLS = ("openai", "ollama", "bedrock")
_BEDROCK_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)$")


def _route(protocol: str, path: str, body: dict[str, Any]) -> tuple[Conversation, bool] | None:
    if protocol == "openai" and path == "/v1/chat/completions":
        return _read_openai(body), bool(body.get("stream"))
    if protocol == "ollama" and path == "/api/chat":
        return _read_ollama(body), body.get("stream") is not False
    match = _BEDROCK_PATH.match(path) if protocol == "bedrock" else None
    if match:
        return _read_bedrock(body, unquote(match["model"])), match["op"] == "converse-stream"
    return None


def _handler(owner: LoopbackModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            started = time.perf_counter()
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.sent = 0
            body = json.loads(raw or b"{}")
            routed = _route(owner.protocol, self.path.split("?", 1)[0], body)
            if routed is None or owner.status != 200:
                status = 404 if routed is None else owner.status
                self.send_json(status, {"error": {"message": "invalid api key" if routed else "not found",
                                                  "type": "invalid_request_error"}, "message": "rejected"})
                return
            conversation, stream = routed
            reply = owner.brain(conversation)
            spoken = reply.text + "".join(n + json.dumps(a) for n, a in reply.tool_calls)
            usage = (count_tokens(json.dumps(body)), max(count_tokens(spoken), 1))
            {"openai": lambda: _openai(self, body, reply, usage), "ollama": lambda: _ollama(self, body, reply, usage),
             "bedrock": lambda: _bedrock(self, stream, reply, usage)}[owner.protocol]()
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
