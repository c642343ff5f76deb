"""What happens around every model call: the history window, redaction for remote models, and the caps.

- History: the last ``agent.history_turns`` questions of the session. Tool results of earlier questions are
  sent as their one-line summaries (the findings stay reachable through ``list_findings``/``get_finding``);
  only the current question's results go whole.
- Redaction: messages sent to a model that is not the offline planner pass through the
  :class:`~fmdoctor.assistant.safety.Redactor` (the graph's own state keeps the originals, for the person).
- Caps: once the question used ``agent.max_tool_calls`` tool calls the model is called without tools (it
  must answer); past ``agent.max_turn_tokens`` (input + output, all calls of the question) or when a model
  keeps calling tools anyway, the turn ends with an answer written from the findings gathered so far.
- Scope: a question naming a cluster other than the conversation's (``is gpu-node-2 of cluster prod-train
  healthy?`` asked of demo-llm-train) is answered with what this conversation can see and how to ask about the
  other, before any tool runs: a node of the same name in this cluster is another node, so its answer would be
  about something that was not asked (:func:`other_cluster`).
- Usage: tokens are counted from the provider's numbers (``usage_metadata``) where it reports them, else
  estimated at 4 characters a token; the turn's :class:`~fmdoctor.assistant.session.Usage` says which.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from fmdoctor.assistant.compose import compose
from fmdoctor.assistant.intents import Plan
from fmdoctor.assistant.results import result_of
from fmdoctor.assistant.safety import Redactor, delimit, undelimit, without_data
from fmdoctor.assistant.session import AssistantContext
from fmdoctor.config import AgentSettings
from fmdoctor.engine.entities import clusters_named, mistyped

CHARS_PER_TOKEN = 4  # a conservative estimate where a provider reports no usage
EXTRA_MODEL_CALLS = 3  # model calls allowed past the tool-call cap before the turn is ended for it


def window(messages: list[BaseMessage], turns: int) -> list[BaseMessage]:
    """The last ``turns`` questions with everything after them; cut only at a question, never inside a
    tool call and its result."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    return messages[starts[-turns]:] if len(starts) > turns else messages


def compact_history(messages: list[BaseMessage]) -> list[BaseMessage]:
    """Tool results before the current question as their summary line: the model answered from them
    already, and resending each whole made every later question pay for all the earlier ones."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
    return [summarised(m) if i < start and isinstance(m, ToolMessage) else m for i, m in enumerate(messages)]


def summarised(message: ToolMessage) -> ToolMessage:
    result = result_of(message)
    first = (f"{result.status.value}: {result.message}" if result is not None
             else undelimit(str(message.content)).split("\n", 1)[0])
    name = message.name or "tool"
    text = f"{first}\n(an earlier question's result, shortened: list_findings or get_finding(id) for details)"
    return message.model_copy(update={"content": delimit(name, text)})


def redact_message(message: BaseMessage, redact: Redactor) -> BaseMessage:
    content = message.content
    if isinstance(content, str):
        cleaned: Any = redact(content)
    else:
        cleaned = [{**b, "text": redact(b["text"])} if isinstance(b, dict) and isinstance(b.get("text"), str)
                   else redact(b) if isinstance(b, str) else b for b in content]
    update: dict[str, Any] = {"content": cleaned}
    if isinstance(message, AIMessage) and message.tool_calls:
        update["tool_calls"] = [{**c, "args": json.loads(redact(json.dumps(c["args"])))} for c in message.tool_calls]
    return message.model_copy(update=update)


def estimate_tokens(messages: list[BaseMessage], extra: str = "") -> int:
    size = len(extra) + sum(len(str(m.content)) + len(json.dumps(getattr(m, "tool_calls", []) or [])) for m in messages)
    return size // CHARS_PER_TOKEN + 1


def stop_answer(messages: list[BaseMessage], note: str) -> AIMessage:
    """End the turn with what the tools found so far (grounded, like the planner's answers)."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
    results = [r for m in messages[start:] if isinstance(m, ToolMessage) and (r := result_of(m)) is not None]
    question = str(messages[start].content) if messages else ""
    return AIMessage(compose(question, Plan(), results, note=note))


def other_cluster(messages: list[BaseMessage], ctx: AssistantContext) -> AIMessage | None:
    """The answer to a question that names a cluster this conversation does not look at, or None. Asked before any
    tool of the question ran (never after: the tools' answers are about this conversation's cluster)."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    if start < 0 or any(isinstance(m, ToolMessage) for m in messages[start + 1:]):
        return None
    content = messages[start].content
    question = content if isinstance(content, str) else " ".join(
        b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    settings = ctx.doctor.settings
    own = ctx.own_clusters()
    configured = [name for name in settings.clusters if name not in own]
    asked = without_data(question)  # an alert quoted as data may name its own cluster (an EKS cluster's name)
    # this cluster's name mistyped ('llm-trian') is this cluster, unless it is a configured one's name
    others = [n for n in clusters_named(asked, [*own, *configured])
              if n in configured or not any(mistyped(n, o) for o in own)]
    if not others:
        return None
    name = others[0]
    if ctx.doctor.demo:
        how = f"The demo has only cluster {ctx.cluster}."
    elif name in configured:
        how = (f"fmdoctor is configured for {name}: ask about it in a conversation about that cluster "
               f"(fmdoctor ask --cluster {shlex.quote(name)} ...).")
    else:
        known = ", ".join(settings.clusters) or "none"
        how = f"fmdoctor is configured for no cluster {name} (clusters in its configuration: {known})."
    return AIMessage(f"You asked about cluster {name}, but I can only see cluster {ctx.cluster} here, so I have not "
                     f"answered about {name} and checked nothing: a resource of the same name in {ctx.cluster} is "
                     f"another one. {how} Ask again about {ctx.cluster}, or without naming another cluster.")


class ModelGuard(AgentMiddleware):
    def __init__(self, settings: AgentSettings, redactor: Redactor | None = None):
        super().__init__()
        self.settings = settings
        self.redactor = redactor
        self._schema_cache: dict[tuple[str, ...], int] = {}

    def _schema_tokens(self, tools: list[Any]) -> int:
        """The tool specs' estimated weight (they go with every call); computed once per set of tools."""
        key = tuple(getattr(t, "name", str(t)) for t in tools)
        if key not in self._schema_cache:
            specs = [convert_to_openai_tool(t) if not isinstance(t, dict) else t for t in tools]
            self._schema_cache[key] = len(json.dumps(specs)) // CHARS_PER_TOKEN
        return self._schema_cache[key]

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        ctx: AssistantContext = request.runtime.context
        turn = ctx.session.turn
        messages = compact_history(window(list(request.messages), self.settings.history_turns))
        if self.redactor is not None:
            messages = [redact_message(m, self.redactor) for m in messages]
        tools = request.tools
        system = request.system_message.content if request.system_message else ""
        estimate = estimate_tokens(messages, str(system)) + self._schema_tokens(tools)
        if ctx.cancel is not None and ctx.cancel.is_set():
            return stop_answer(list(request.messages), "Cancelled. What the tools found before that:")
        elsewhere = other_cluster(list(request.messages), ctx)
        if elsewhere is not None:
            return elsewhere
        if turn is not None:
            turn.model_calls += 1
            cap = self.settings.max_tool_calls
            if turn.executed >= cap:
                tools = []
            if turn.model_calls > cap + EXTRA_MODEL_CALLS:
                return stop_answer(list(request.messages), f"Stopped: the model kept asking for tools past the cap "
                                   f"of {cap} calls per question. What the tools found:")
            if turn.tokens_used + estimate > self.settings.max_turn_tokens:
                return stop_answer(list(request.messages), f"Stopped: this question reached its token budget "
                                   f"({self.settings.max_turn_tokens} tokens). What the tools found:")
        response = handler(request.override(messages=messages, tools=tools))
        if turn is not None:
            turn.usage.add(*usage_of(response, estimate))
        return response


def usage_of(response: Any, estimate: int) -> tuple[int, int, bool]:
    """(input tokens, output tokens, whether the provider reported them) of one model call."""
    messages = response.result if isinstance(response, ModelResponse) else [response]
    usage = next((m.usage_metadata for m in messages if isinstance(m, AIMessage) and m.usage_metadata), None)
    if usage and (usage.get("input_tokens") or usage.get("output_tokens")):
        return int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0), True
    return estimate, sum(estimate_tokens([m]) for m in messages), False
