"""The offline model: a deterministic LangChain chat model that plans tool calls from the question's intent
and writes the answer from the findings. No key, no network; the default when no provider is configured.

It is a proper ``BaseChatModel``: ``bind_tools`` binds the tool specs (as every provider's model does) and
the planner learns what is installed from them alone (family tools list their check ids in the schema's
enum), so checks added later are used without changes here. One turn:

1. ``find_names``: which of the question's words the cluster's inventory knows (a node, endpoint, group,
   bucket, file system, job), whatever their shape;
2. the question's intents -> the checks that answer it -> one call per family tool (or ``check_all``
   when unsure or nothing installed covers the topic; ``why_not`` head:22 for SSH questions); a question
   naming a node, group, endpoint, bucket, file system or job gets ``check_resource`` for each name instead
   (``why_not`` between the named things for "can X reach Y?"), and the unscoped calls only when a
   name-shaped word turns out not to be one of the cluster's;
3. for "fix ..." questions with remediation installed: ``propose_fix`` for the matching fixable finding,
   then ``apply_fix`` of that plan, which pauses for a person's approval;
4. the answer, composed from the tool results (:mod:`fmdoctor.assistant.compose`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

from fmdoctor.assistant.compose import compose
from fmdoctor.assistant.intents import Plan, fix_target, plan_for, wants_names
from fmdoctor.assistant.results import ToolResult, ToolStatus, result_of
from fmdoctor.assistant.scope import Named

PROPOSE, APPLY, RUNBOOK = "propose_fix", "apply_fix", "get_runbook"
CHECK_RESOURCE, FIND_NAMES = "check_resource", "find_names"


def _enum(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        if isinstance(schema.get("enum"), list):
            return [str(v) for v in schema["enum"]]
        if isinstance(schema.get("const"), str):  # a one-check family: pydantic writes Literal["x"] as const
            return [schema["const"]]
        return [v for value in schema.values() for v in _enum(value)]
    if isinstance(schema, list):
        return [v for value in schema for v in _enum(value)]
    return []


class Toolbox:
    """What the bound tool specs offer: tool names, and which check ids each family tool runs."""

    def __init__(self, specs: Sequence[dict[str, Any]]):
        self.names: set[str] = set()
        self.families: dict[str, tuple[str, ...]] = {}
        for spec in specs:
            function = spec.get("function", spec)
            name = function.get("name", "")
            self.names.add(name)
            ids = _enum((function.get("parameters") or {}).get("properties", {}).get("checks"))
            if name.startswith("check_") and ids:
                self.families[name] = tuple(dict.fromkeys(ids))

    @property
    def remediation(self) -> bool:
        return {PROPOSE, APPLY} <= self.names


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)


def _result(message: ToolMessage) -> ToolResult:
    result = result_of(message)
    if result is not None:
        return result
    name = message.name or "tool"
    if message.status == "error" and name == APPLY:  # the approval middleware's rejection carries no artifact
        return ToolResult(tool=APPLY, status=ToolStatus.ERROR, message="a person declined", data={"denied": True})
    return ToolResult.error(name, _text(message)[:300])


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "args": args, "id": f"fmd-{uuid.uuid4().hex[:12]}", "type": "tool_call"}


def next_message(messages: Sequence[BaseMessage], toolbox: Toolbox) -> AIMessage:
    """The planner's whole decision for the conversation so far (pure: messages and tool specs in)."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    if start < 0:
        return AIMessage("Ask me about a cluster: its health, SSH access, slow training, Spot risk or a fix.")
    question = _text(messages[start])
    earlier = any(isinstance(m, ToolMessage) and (r := result_of(m)) and r.found_any for m in messages[:start])
    turn = messages[start + 1:]
    called = [c["name"] for m in turn if isinstance(m, AIMessage) for c in m.tool_calls]
    if not called and FIND_NAMES in toolbox.names and wants_names(question):
        return AIMessage("", tool_calls=[_call(FIND_NAMES, {"text": question})])
    results = [_result(m) for m in turn if isinstance(m, ToolMessage)]
    recognised = _recognised(question, results)
    results = [r for r in results if r.tool != FIND_NAMES]
    called = [name for name in called if name != FIND_NAMES]
    plan = plan_for(question, toolbox.families, toolbox.names, earlier_findings=earlier, recognised=recognised)
    if not called:
        if not plan.calls:
            return AIMessage("I cannot answer that: no fmdoctor tool is available to me.")
        return AIMessage("", tool_calls=[_call(name, args) for name, args in plan.calls])
    fallback = _fallback(plan, called, results)
    if fallback:
        return AIMessage("", tool_calls=[_call(name, args) for name, args in fallback])
    findings = [f for r in results for f in r.findings]
    target = fix_target(question, findings) if plan.fix else None
    if plan.runbook:
        target = fix_target(question, findings, fixable=False)
        follow_up = _runbook_step(toolbox, called, target)
    else:
        follow_up = _fix_step(plan, toolbox, called, results, target)
    if follow_up is not None:
        return AIMessage("", tool_calls=[follow_up])
    return AIMessage(compose(question, plan, results, target=target, remediation=toolbox.remediation))


def _recognised(question: str, results: list[ToolResult]) -> list[Named]:
    """The names find_names looked up in the inventory, where the question has them."""
    found = next((r.data for r in results if r.tool == FIND_NAMES), None) or {}
    names = found.get("names") or []
    # a word close to one of the cluster's names ('demo-llm-chatt'): asked about as a weak name, so the answer
    # says it is nothing of the cluster and which name is close, before answering for the whole cluster
    close = found.get("close") or []
    return [Named(str(n["text"]), max(question.find(str(n["text"])), 0), True, str(n.get("kind", "")))
            for n in names if isinstance(n, dict) and n.get("text")] + \
        [Named(str(n["text"]), max(question.find(str(n["text"])), 0), False)
         for n in close if isinstance(n, dict) and n.get("text")]


def _fallback(plan: Plan, called: list[str], results: list[ToolResult]) -> list[tuple[str, dict]]:
    """The unscoped calls, when every name the question gave turned out not to be one of the cluster's and each
    was only name-shaped ('llama-70b' in a question about checkpoints) or the cluster itself."""
    if not plan.scoped or any(name != CHECK_RESOURCE for name in called):
        return []
    scoped = [r for r in results if r.tool == CHECK_RESOURCE]
    if not scoped or any(r.status is not ToolStatus.ERROR or not r.data.get("unknown") for r in scoped):
        return []
    weak = {n.text for n in plan.named if not n.strong}
    topical = any(i not in plan.missing for i in plan.intents)
    if all(r.data["unknown"] == r.data.get("cluster") or (r.data["unknown"] in weak and topical) for r in scoped):
        return plan.unscoped or [("check_all", {})]
    return []


def _runbook_step(toolbox: Toolbox, called: list[str], target: dict | None) -> dict[str, Any] | None:
    if RUNBOOK not in toolbox.names or RUNBOOK in called or target is None:
        return None
    return _call(RUNBOOK, {"runbook_id": target["runbook"], "finding_id": target["id"]})


def _fix_step(plan: Plan, toolbox: Toolbox, called: list[str], results: list[ToolResult],
              target: dict | None) -> dict[str, Any] | None:
    if not plan.fix or not toolbox.remediation:
        return None
    if PROPOSE not in called:
        if target is None:
            return None
        return _call(PROPOSE, {"check_id": target["check"], "resource": target["resource"]})
    proposed = next((r for r in reversed(results) if r.tool == PROPOSE), None)
    if APPLY not in called and proposed is not None and proposed.status is ToolStatus.APPROVAL_REQUIRED:
        return _call(APPLY, {"plan_digest": proposed.data.get("digest")})
    return None


class OfflinePlanner(BaseChatModel):
    """Deterministic tool-calling chat model; see the module docstring."""

    model_name: str = "fmdoctor-offline-planner"

    @property
    def _llm_type(self) -> str:
        return "fmdoctor-offline"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        message = next_message(messages, Toolbox(kwargs.get("tools") or []))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        message = next_message(messages, Toolbox(kwargs.get("tools") or []))
        if message.tool_calls:
            chunks = [{"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                      for i, c in enumerate(message.tool_calls)]
            yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=chunks))
            return
        for line in str(message.content).splitlines(keepends=True):  # one chunk per line: answers stream in
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=line))
            if run_manager:
                run_manager.on_llm_new_token(line, chunk=chunk)
            yield chunk
