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
import logging
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
from fmdoctor.assistant.scope import NOT_NAMES
from fmdoctor.assistant.session import AssistantContext
from fmdoctor.config import AgentSettings
from fmdoctor.engine.entities import (
    EKS_ARN,
    HYPERPOD_ARN,
    PLACED,
    ClusterMention,
    cluster_identities,
    cluster_mentions,
    mistyped,
    names_a_thing,
)
from fmdoctor.engine.hyperpod import HyperPodCluster, probe_hyperpod_cluster
from fmdoctor.engine.inventory import Inventory

log = logging.getLogger(__name__)

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
    tool of the question ran (never after: the tools' answers are about this conversation's cluster).

    The clusters a question names are :func:`~fmdoctor.engine.entities.cluster_mentions`'; this cluster's own names
    (the configuration's, its HyperPod cluster's, and those its inventory knows: its HyperPod ARN and id, its EKS
    cluster's name and ARN) and a mistyped own name are never another cluster. The inventory is read only when the
    question needs it: a name standing where a cluster's does (is it a thing of this cluster?), an ARN or a name
    beside 'cluster' that the configuration does not know as this cluster's."""
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
    this = _ThisCluster(ctx)
    for mention in cluster_mentions(asked, [*own, *configured], names=this.names):
        if mention.how == PLACED and mention.name not in configured and NOT_NAMES.match(mention.name):
            continue  # a word of the trade in a cluster's place ('is gpu-node-2 in all-reduce?'), no name
        refusal = _refusal(mention, ctx, own, configured, this)
        if refusal is not None:
            return AIMessage(refusal)
    return None


class _ThisCluster:
    """What the conversation's cluster's inventory says, read once and only when a question needs it; an inventory
    that cannot be read knows nothing (the question is then asked back, never answered about another thing)."""

    def __init__(self, ctx: AssistantContext):
        self.ctx = ctx
        self._read = False
        self._inventory: Inventory | None = None
        self._names: Callable[[str], bool] | None = None
        self._hyperpod_read = False
        self._hyperpod: HyperPodCluster | None = None

    def inventory(self) -> Inventory | None:
        if not self._read:
            self._read = True
            try:
                self._inventory = self.ctx.doctor.inventory(self.ctx.cluster)
                from fmdoctor.assistant.resource_tool import known_names

                self._names = names_a_thing(self._inventory, known_names(self.ctx))
            except Exception:  # unreadable: nothing is known to be this cluster's
                log.debug("the inventory of %s could not be read for the cluster guard", self.ctx.cluster,
                          exc_info=True)
        return self._inventory

    def names(self, word: str) -> bool:
        self.inventory()
        return self._names is not None and self._names(word)

    def hyperpod(self) -> HyperPodCluster | None:
        """Its HyperPod cluster: the inventory's, or the configured one's (``hyperpod.cluster_name``: the inventory
        looks HyperPod up only for a cluster no instance carries), asked of SageMaker once."""
        if not self._hyperpod_read:
            self._hyperpod_read = True
            inventory = self.inventory()
            self._hyperpod = inventory.hyperpod if inventory is not None else None
            settings = self.ctx.doctor.cluster_settings(self.ctx.cluster)
            if self._hyperpod is None and settings.hyperpod.cluster_name:
                try:
                    aws = self.ctx.doctor.connect(settings)
                    self._hyperpod = probe_hyperpod_cluster(aws, settings.hyperpod.cluster_name)
                except Exception:  # not known: the ARN is asked back
                    log.debug("the HyperPod cluster of %s could not be read", self.ctx.cluster, exc_info=True)
        return self._hyperpod

    def identities(self) -> frozenset[str]:
        inventory = self.inventory()
        return cluster_identities(inventory, self.hyperpod()) if inventory is not None else frozenset()


def _refusal(mention: ClusterMention, ctx: AssistantContext, own: tuple[str, ...], configured: list[str],
             this: _ThisCluster) -> str | None:
    """What to answer about a cluster the question names, or None when it is this one."""
    name, cluster = mention.name, ctx.cluster
    if mention.how == HYPERPOD_ARN:
        return _hyperpod_arn(mention, ctx, this)
    if name in configured:
        return _refused(name, cluster, _elsewhere(ctx, f"fmdoctor is configured for {name}: ask about it in a "
                                                       f"conversation about that cluster (fmdoctor ask --cluster "
                                                       f"{shlex.quote(name)} ...)."))
    if mention.how == EKS_ARN and mention.arn:  # its name in another region's or account's ARN is another cluster
        where = _arn_elsewhere(mention.arn, ctx, this)
        if where is not None:
            return _refused(mention.arn, cluster, _elsewhere(ctx, where))
    if name.lower() in {o.lower() for o in own} or any(mistyped(name, o) for o in own):  # this one, or mistyped
        return None
    if name.lower() in this.identities():  # the name of its EKS cluster or HyperPod cluster, as AWS knows it
        return None
    unknown = _elsewhere(ctx, f"fmdoctor is configured for no cluster {name} (clusters in its configuration: "
                              f"{', '.join(ctx.doctor.settings.clusters) or 'none'}).")
    if not mention.sure:
        return (f"You named {name} where a cluster's name stands, and it is neither cluster {cluster} nor a node, "
                f"endpoint, group, file system, job or bucket of it, so it may be another cluster. I can only see "
                f"cluster {cluster} here, so I have not answered about {name} and checked nothing: a resource of "
                f"the same name in {cluster} is another one. {unknown} If {name} is something of {cluster}, name "
                f"it as {cluster} calls it; otherwise ask again without naming another cluster.")
    return _refused(name, cluster, unknown)


def _arn_elsewhere(arn: str, ctx: AssistantContext, this: _ThisCluster) -> str | None:
    """Why an EKS cluster's ARN that carries one of this cluster's names is another cluster, or None: EKS names a
    cluster uniquely within one account and region only, so the ARN is this cluster's when it is one this cluster is
    known by (its kubeconfig context's, its HyperPod cluster's EKS cluster's), and another's when its region or
    account is not this cluster's (the region of those ARNs or of its inventory; the account of its known ARNs).
    Read only for an ARN whose name is this cluster's."""
    own_name = arn.rsplit("/", 1)[-1].lower() in {o.lower() for o in ctx.own_clusters()}
    if not own_name and arn.rsplit("/", 1)[-1].lower() not in this.identities():
        return None  # not this cluster's name: refused or answered as any other name
    context = (ctx.doctor.cluster_settings(ctx.cluster).scheduler.kubernetes.context or "").lower()
    if arn.lower() == context:  # from the settings: no call to AWS
        return None
    known = [a.lower() for a in (context, *this.identities()) if a.lower().startswith("arn:")]
    if arn.lower() in known:
        return None
    fields = [a.split(":") for a in known if len(a.split(":")) > 5]
    _, _, _, region, account = arn.lower().split(":")[:5]
    inventory = this.inventory()
    regions = {f[3] for f in fields if f[3]} | ({inventory.region.lower()} if inventory and inventory.region else set())
    accounts = {f[4] for f in fields if f[4]}
    if region and regions and region not in regions:
        return (f"That ARN is in region {region}; cluster {ctx.cluster} is in {', '.join(sorted(regions))}, and EKS "
                f"names a cluster uniquely only within one region and account.")
    if account and accounts and account not in accounts:
        return (f"That ARN is in account {account}; cluster {ctx.cluster} is in {', '.join(sorted(accounts))}, and "
                f"EKS names a cluster uniquely only within one region and account.")
    return None


def _elsewhere(ctx: AssistantContext, how: str) -> str:
    """Where else to ask: ``how``, except in the demo, which has one cluster."""
    return f"The demo has only cluster {ctx.cluster}." if ctx.doctor.demo else how


def _refused(name: str, cluster: str, how: str) -> str:
    return (f"You asked about cluster {name}, but I can only see cluster {cluster} here, so I have not answered "
            f"about {name} and checked nothing: a resource of the same name in {cluster} is another one. {how} "
            f"Ask again about {cluster}, or without naming another cluster.")


def _hyperpod_arn(mention: ClusterMention, ctx: AssistantContext, this: _ThisCluster) -> str | None:
    """A HyperPod ARN holds its cluster's id, not its name: this cluster's when it is its HyperPod cluster's ARN
    (DescribeCluster's ClusterArn), region and account included; another's when this cluster's HyperPod ARN is known
    and differs; asked back when it is not known."""
    arn, cluster = mention.name, ctx.cluster
    hyperpod = this.hyperpod()
    how = _elsewhere(ctx, f"Ask again about {cluster} by its name, or about another cluster in a conversation about "
                          f"it (fmdoctor ask --cluster NAME ...; clusters in its configuration: "
                          f"{', '.join(ctx.doctor.settings.clusters) or 'none'}).")
    if hyperpod is not None and hyperpod.arn:
        if arn.lower() == hyperpod.arn.lower():  # its id in another region's or account's ARN is no ARN of it
            return None
        return (f"You asked about the HyperPod cluster {arn}, but I can only see cluster {cluster} here, whose "
                f"HyperPod cluster is {hyperpod.arn}, so I have not answered about {arn} and checked nothing: a "
                f"resource of the same name in {cluster} is another one. {how}")
    why = ("its inventory could not be read" if this.inventory() is None else
           f"{cluster} has no HyperPod cluster whose ARN fmdoctor could read")
    return (f"You named the HyperPod cluster {arn} by its ARN, which holds the cluster's id, not its name. I can only "
            f"see cluster {cluster} here, and I cannot tell whether that ARN is its own ({why}), so I have checked "
            f"nothing. {how}")


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
