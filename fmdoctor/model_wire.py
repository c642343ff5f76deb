"""The model providers' wire protocols, as :mod:`fmdoctor.loopback_models` speaks them: requests read into a
provider-neutral :class:`Conversation`, replies written back in each protocol.

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

Tokens are counted by :func:`count_tokens`, an estimate (one token per word piece of up to 8 letters, digit
group of up to 3, or pair of symbols, roughly how BPE tokenizers split identifiers and JSON), not a real
tokenizer.
"""

from __future__ import annotations

import binascii
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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


def write_openai(handler: Any, body: dict[str, Any], reply: Reply, usage: tuple[int, int]) -> None:
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


def write_ollama(handler: Any, body: dict[str, Any], reply: Reply, usage: tuple[int, int]) -> None:
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


def write_bedrock(handler: Any, stream: bool, reply: Reply, usage: tuple[int, int]) -> None:
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


PROTOCOLS = ("openai", "ollama", "bedrock")
_BEDROCK_PATH = re.compile(r"^/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)$")


def route(protocol: str, path: str, body: dict[str, Any]) -> tuple[Conversation, bool] | None:
    if protocol == "openai" and path == "/v1/chat/completions":
        return _read_openai(body), bool(body.get("stream"))
    if protocol == "ollama" and path == "/api/chat":
        return _read_ollama(body), body.get("stream") is not False
    match = _BEDROCK_PATH.match(path) if protocol == "bedrock" else None
    if match:
        return _read_bedrock(body, unquote(match["model"])), match["op"] == "converse-stream"
    return None
