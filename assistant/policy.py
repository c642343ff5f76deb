"""The tool-call policy, in fmdoctor's own code: deny by default, whatever the model says.

LangChain's ``HumanInTheLoopMiddleware`` auto-approves every tool it is not told about, and its "approve"
is only a message in the graph. So it is used only to pause and ask; the decision that lets a call run is
taken here:

- a tool marked ``read`` runs (up to ``agent.max_tool_calls`` calls per question, repeats included); a
  call identical to one made earlier in the question (same tool and arguments) is answered from that one;
- a tool marked ``mutate`` runs only when the session holds an approval object for exactly the plan digest
  in its arguments. Approvals are Python objects that front-end code creates after a person said yes
  (:meth:`~fmdoctor.assistant.api.Assistant.resume`); no tool output or model text can produce one;
- anything else (unmarked, unknown, hallucinated) is refused; so is every call once the turn is cancelled.

:class:`ToolEvents` records each call (arguments, duration, status, finding count) for the answer and
streams it to front ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, InterruptOnConfig
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import Command

from fmdoctor.assistant.results import ToolResult, ToolStatus, result_of
from fmdoctor.assistant.safety import delimit, undelimit
from fmdoctor.assistant.session import AssistantContext, ToolCallRecord
from fmdoctor.assistant.tools import ACCESS, EVENT, MUTATE, READ

Handler = Callable[[ToolCallRequest], ToolMessage | Command[Any]]


def access_of(tool: BaseTool | None) -> str | None:
    return (tool.metadata or {}).get(ACCESS) if tool is not None else None


def refuse(request: ToolCallRequest, message: str, reason: str) -> ToolMessage:
    name = request.tool_call["name"]
    result = ToolResult.error(name, message, refused=reason)
    ctx: AssistantContext = request.runtime.context
    return ToolMessage(content=result.content(ctx.settings.max_tool_output_chars), artifact=result.artifact(),
                       name=name, tool_call_id=request.tool_call["id"], status="error")


def _audit_refusal(ctx: AssistantContext, request: ToolCallRequest, reason: str) -> None:
    """A refused tool call is a decision too: one audit record (the arguments are the model's, kept short)."""
    args = {k: str(v)[:200] for k, v in dict(request.tool_call.get("args") or {}).items()}
    ctx.backends.record(ctx.doctor, "refused", reason, cluster=ctx.cluster, session=ctx.session.id,
                        tool=request.tool_call["name"], arguments=args)


class ToolGate(AgentMiddleware):
    """Per-question cap on tool calls and the approval requirement for mutating tools."""

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        ctx: AssistantContext = request.runtime.context
        turn = ctx.session.turn
        access = access_of(request.tool)
        if ctx.cancel is not None and ctx.cancel.is_set():
            return refuse(request, "cancelled by the person: answer from the results you have", "cancelled")
        if access == MUTATE:
            digest = request.tool_call["args"].get("plan_digest")
            if not ctx.session.has_approval(digest):
                _audit_refusal(ctx, request, "the model asked to apply a plan no person approved")
                return refuse(request, "refused: a person has not approved this plan, so nothing was changed",
                              "not-approved")
        elif access != READ:
            _audit_refusal(ctx, request, "the model asked for a tool the policy does not allow")
            return refuse(request, f"refused: {request.tool_call['name']!r} is not an allowed tool", "not-allowed")
        if turn is None:
            return handler(request)
        if turn.executed >= ctx.settings.max_tool_calls:
            return refuse(request, f"tool-call cap reached ({ctx.settings.max_tool_calls} per question, repeats "
                          "included): answer from the results you have", "cap")
        turn.executed += 1
        if access != READ:
            return handler(request)
        key = request.tool_call["name"] + json.dumps(request.tool_call["args"], sort_keys=True, default=str)
        with turn.call_lock(key):
            if key in turn.results:
                return repeated(request, *turn.results[key])
            outcome = handler(request)
            result = result_of(outcome) if isinstance(outcome, ToolMessage) else None
            if result is not None and result.status is not ToolStatus.APPROVAL_REQUIRED:
                turn.results[key] = (request.tool_call["id"] or "", outcome)
            return outcome


def repeated(request: ToolCallRequest, call_id: str, earlier: ToolMessage) -> ToolMessage:
    """An identical call made earlier in this question: its first line and a pointer, not the whole result
    again (the model still has it; resending it is what made looping models expensive)."""
    name = request.tool_call["name"]
    first = undelimit(str(earlier.content)).split("\n", 1)[0]
    text = (f"{first}\nrepeat of call {call_id} (same tool and arguments) in this question: its result above "
            "still holds; not run again")
    return ToolMessage(content=delimit(name, text), artifact=earlier.artifact, name=name,
                       tool_call_id=request.tool_call["id"], status=earlier.status)


class ToolEvents(AgentMiddleware):
    """Times every tool call and reports it (stream event + the turn's record)."""

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        ctx: AssistantContext = request.runtime.context
        call = request.tool_call
        record = ToolCallRecord(call_id=call["id"] or "", name=call["name"], args=dict(call["args"]))
        if ctx.session.turn is not None:
            ctx.session.turn.tool_calls.append(record)
        write = request.runtime.stream_writer
        write({EVENT: "tool_started", **record.to_json_dict()})
        started = record.started = time.perf_counter()
        outcome = handler(request)
        record.duration_s = time.perf_counter() - started
        message = outcome if isinstance(outcome, ToolMessage) else None
        result = result_of(message) if message is not None else None
        if result is not None:
            record.status = "refused" if result.data.get("refused") else result.status.value
            record.finding_count = len(result.findings)
            record.message = result.message
        else:
            record.status = ToolStatus.ERROR.value if message is not None and message.status == "error" else "success"
            record.message = str(message.content)[:200] if message is not None else ""
        write({EVENT: "tool_finished", **record.to_json_dict()})
        return outcome


def interrupt_config(tools: list[BaseTool]) -> dict[str, bool | InterruptOnConfig]:
    """Every tool that is not read-only pauses for a person (approve or reject; no edits of the plan)."""
    return {t.name: InterruptOnConfig(allowed_decisions=["approve", "reject"],
                                      description=f"{t.name} changes the account and needs your approval")
            for t in tools if access_of(t) != READ}
