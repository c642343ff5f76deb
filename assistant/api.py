"""The assistant's front door for every front end (CLI ``fmdoctor ask``, the TUI, Slack).

    from fmdoctor.assistant import Assistant
    assistant = Assistant(doctor, "llm-train")          # model from doctor.settings.agent; offline if unset
    answer = assistant.ask("why is training slow?", session_id="slack-thread-1234")
    answer.answer, answer.findings, answer.tool_calls    # grounded text, finding JSON, what ran (timed)

    for event in assistant.stream("is my cluster healthy?", session_id="tui", cancel=stop_event):
        ...  # ToolStarted(name, args) / CheckProgress / ToolFinished(status, duration_s, finding_count)
             # / AnswerToken (a preview as the model writes) / ApprovalNeeded / TurnFinished(answer)

``TurnFinished.answer`` is the final, cleaned text; render it in place of the streamed tokens. Setting
``cancel`` stops running checks and further tool and model calls; the turn still ends with an answer.
Errors are typed: ``ConfigError`` (bad model string, missing extra) and ``ModelError`` (provider down, key
rejected) are :class:`~fmdoctor.engine.errors.FmdoctorError` with a message and hint, never a traceback.

Sessions (``session_id``: a Slack thread, a TUI tab) keep their own history and state; one question at a
time per session, any number of sessions at once.

Approvals: when the agent wants to change the account, the turn ends with ``answer.approval`` (an
:class:`~fmdoctor.assistant.events.ApprovalRequest`: the exact plan and its dry run). Show it, ask, then::

    from fmdoctor.remediation.approval import Approval
    approval = Approval(request.plan_digest, approver="U123", channel="slack", granted_at=now) if yes else None
    answer = assistant.resume(session_id, approval)  # None (or any other digest) declines: nothing changes

A new question in a session whose plan waits for approval declines that plan first.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.types import Command

from fmdoctor.assistant.agent import build_agent
from fmdoctor.assistant.backends import Backends
from fmdoctor.assistant.compose import gather
from fmdoctor.assistant.events import (
    AnswerToken,
    ApprovalNeeded,
    ApprovalRequest,
    AssistantAnswer,
    AssistantEvent,
    CheckProgress,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)
from fmdoctor.assistant.extra_tools import extra_tools
from fmdoctor.assistant.guard import stop_answer
from fmdoctor.assistant.providers import ModelError, describe, is_offline, load_chat_model
from fmdoctor.assistant.results import result_of, split_citations
from fmdoctor.assistant.safety import Redactor, clean_output, strip_invisible
from fmdoctor.assistant.session import AssistantContext, SessionState, Turn
from fmdoctor.assistant.tools import EVENT, check_tools
from fmdoctor.config import AgentSettings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.errors import FmdoctorError, UsageError

log = logging.getLogger(__name__)

DEFAULT_SESSION = "default"
MAX_QUESTION_CHARS = 4000
_DECLINED = {"type": "reject", "message": "The person declined this plan; nothing was changed. Do not retry it."}
_NOT_A_PLAN = {"type": "reject", "message": "Refused: no plan with this digest was proposed; call propose_fix."}


class Assistant:
    def __init__(self, doctor: Doctor, cluster: str | None = None, settings: AgentSettings | None = None, *,
                 model: BaseChatModel | str | None = None, backends: Backends | None = None,
                 max_sessions: int = 256):
        self.doctor = doctor
        self.cluster = doctor.resolve_cluster(cluster)
        self.settings = settings or doctor.settings.agent
        self.model = model if isinstance(model, BaseChatModel) else load_chat_model(self.settings, model)
        self.model_name = describe(self.model)
        self.backends = backends if backends is not None else Backends.library()
        self.tools = check_tools(doctor.registry) + extra_tools(self.backends)
        self._check_ids = set(doctor.registry.ids())
        redactor = None if is_offline(self.model) else Redactor(self.settings.redact)
        self._memory = InMemorySaver()
        self.agent = build_agent(self.model, self.tools, self.settings, self.cluster, redactor, self._memory)
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._lock = threading.Lock()
        self.max_sessions = max_sessions

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def ask(self, question: str, session_id: str = DEFAULT_SESSION,
            cancel: threading.Event | None = None) -> AssistantAnswer:
        return _final(self.stream(question, session_id, cancel))

    def stream(self, question: str, session_id: str = DEFAULT_SESSION,
               cancel: threading.Event | None = None) -> Iterator[AssistantEvent]:
        question = strip_invisible(question).strip()[:MAX_QUESTION_CHARS]
        if not question:
            raise UsageError("ask a question")
        session = self._session(session_id)
        with session.lock:
            waiting = self._interrupts(session)
            if waiting:  # a plan was waiting for approval: a new question declines it
                for interrupt in waiting:
                    self._audit(session, self._request(session, interrupt), "declined",
                                "a new question was asked instead of approving it")
                for _ in self._drive(Command(resume={i.id: _DECLINED for i in waiting}), session, cancel):
                    pass
            session.turn = Turn(question)
            yield from self._drive({"messages": [HumanMessage(question)]}, session, cancel)

    def resume(self, session_id: str, approval: Any | None,
               cancel: threading.Event | None = None) -> AssistantAnswer:
        return _final(self.resume_stream(session_id, approval, cancel))

    def resume_stream(self, session_id: str, approval: Any | None,
                      cancel: threading.Event | None = None) -> Iterator[AssistantEvent]:
        """Continue after an approval request: ``approval`` for its plan digest approves, anything else declines."""
        session = self._session(session_id)
        with session.lock:
            waiting = self._interrupts(session)
            request = next((r for i in waiting if (r := self._request(session, i)) is not None), None)
            if request is None:
                raise UsageError(f"nothing in session {session_id!r} waits for approval")
            decisions = {i.id: _DECLINED for i in waiting}  # one plan at a time; others are declined
            if approval is not None and getattr(approval, "plan_digest", None) == request.plan_digest:
                session.grant(approval)
                decisions[request.interrupt_id] = {"type": "approve"}  # apply_fix records the approval
            elif approval is not None:
                self._audit(session, request, "refused", "the approval names another plan "
                            f"({str(getattr(approval, 'plan_digest', None))[:16]}): a forged or stale digest",
                            approver=getattr(approval, "approver", None))
            else:
                self._audit(session, request, "declined", "the person did not approve")
            for interrupt in waiting:
                other = self._request(session, interrupt)
                if other is not None and other.interrupt_id != request.interrupt_id:
                    self._audit(session, other, "declined", "another plan was decided first")
            session.turn = session.turn or Turn("(approval)")
            yield from self._drive(Command(resume=decisions), session, cancel)

    def _audit(self, session: SessionState, request: ApprovalRequest | None, decision: str, reason: str,
               approver: str | None = None) -> None:
        """Every decision about a plan is one audit record, whichever front end asked (ask, the TUI, Slack)."""
        if request is None:
            return
        pending = session.plans.get(request.plan_digest)
        self.backends.record(self.doctor, decision, reason, plan=pending.plan if pending else None,
                             approver=approver, session=session.id, plan_digest=request.plan_digest,
                             check=request.check_id, resource=request.resource)

    def reset(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)
            self._memory.delete_thread(session_id)

    # -- internals ---------------------------------------------------------------------------------------

    def _session(self, session_id: str) -> SessionState:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                session = self._sessions[session_id] = SessionState(session_id)
                while len(self._sessions) > self.max_sessions:
                    old, _ = self._sessions.popitem(last=False)
                    self._memory.delete_thread(old)
            else:
                self._sessions.move_to_end(session_id)
            return session

    def _config(self, session: SessionState) -> dict[str, Any]:
        return {"configurable": {"thread_id": session.id}, "recursion_limit": 6 * self.settings.max_tool_calls + 20}

    def _drive(self, payload: Any, session: SessionState, cancel: threading.Event | None) -> Iterator[AssistantEvent]:
        ctx = AssistantContext(self.doctor, self.cluster, session, self.settings, self.backends, cancel)
        while True:
            yield from self._stream_once(payload, ctx)
            unknown = [i for i in self._interrupts(session) if self._request(session, i) is None]
            if not unknown:
                break
            payload = Command(resume={i.id: _NOT_A_PLAN for i in unknown})  # never ask a person about those
        answer = self._answer(session)
        if answer.approval is not None:
            yield ApprovalNeeded(answer.approval)
        yield TurnFinished(answer)

    def _stream_once(self, payload: Any, ctx: AssistantContext) -> Iterator[AssistantEvent]:
        try:
            for part in self.agent.stream(payload, self._config(ctx.session), context=ctx,
                                          stream_mode=["custom", "messages"], version="v2"):
                event = _event(part)
                if event is not None:
                    yield event
        except GraphRecursionError:
            log.warning("session %s: the agent hit its step limit", ctx.session.id)
        except FmdoctorError:
            raise
        except Exception as exc:  # provider down, key rejected, throttled: a message, never a traceback
            log.debug("model failure", exc_info=True)
            raise ModelError(f"the model ({self.model_name}) failed: {Redactor()(f'{type(exc).__name__}: {exc}')}",
                             hint="check agent.model, the endpoint and its key, or run without a model (offline)") \
                from None

    def _interrupts(self, session: SessionState) -> tuple[Any, ...]:
        return tuple(self.agent.get_state(self._config(session)).interrupts)

    def _request(self, session: SessionState, interrupt: Any) -> ApprovalRequest | None:
        value = interrupt.value if isinstance(interrupt.value, dict) else {}
        pending = session.plans.get(str((value.get("args") or {}).get("plan_digest")))
        if pending is None:
            return None
        return ApprovalRequest.of(session.id, interrupt.id, str(value.get("tool_call_id", "")), pending)

    def _answer(self, session: SessionState) -> AssistantAnswer:
        messages: list[BaseMessage] = list(self.agent.get_state(self._config(session)).values.get("messages", []))
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
        turn = messages[start:]
        results = [r for m in turn if isinstance(m, ToolMessage) and (r := result_of(m)) is not None]
        findings, errors, ran, _ = gather(results)
        request = next((r for i in self._interrupts(session) if (r := self._request(session, i)) is not None), None)
        last = turn[-1] if turn else None
        if request is not None:
            text = f"{request.describe()}\nNothing changes unless you approve this plan."
        elif isinstance(last, AIMessage) and not last.tool_calls and str(last.content).strip():
            text = _text(last)
        else:
            text = str(stop_answer(messages, "The model gave no answer. What the tools found:").content)
        text = clean_output(text)
        cited, unknown = split_citations(text, [f["id"] for f in findings], self._check_ids)
        # tools of one model message run in parallel; report them in the order the model asked for them
        requested = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
        asked = {call_id: n for n, call_id in enumerate(requested)}
        calls = sorted(session.turn.tool_calls if session.turn else [], key=lambda c: asked.get(c.call_id, len(asked)))
        return AssistantAnswer(answer=text, session_id=session.id, model=self.model_name, tool_calls=calls,
                               findings=findings, errors=errors, checks_run=ran, citations=cited,
                               unverified_citations=unknown, approval=request,
                               usage=session.turn.usage.to_json_dict() if session.turn else {})


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)


def _event(part: dict[str, Any]) -> AssistantEvent | None:
    data = part.get("data")
    if part.get("type") == "custom" and isinstance(data, dict) and EVENT in data:
        kind = data[EVENT]
        if kind == "tool_started":
            return ToolStarted(data["id"], data["name"], data["args"])
        if kind == "tool_finished":
            return ToolFinished(data["id"], data["name"], data["args"], data["status"], data["duration_s"],
                                data["finding_count"], data["message"])
        if kind == "check":
            return CheckProgress(data["check_id"], data["phase"], data["findings"], data["done"], data["total"])
        return None
    if part.get("type") == "messages":
        message, meta = data
        if meta.get("langgraph_node") == "model" and isinstance(message, AIMessage) and not message.tool_calls \
                and not getattr(message, "tool_call_chunks", None):
            text = strip_invisible(_text(message))
            return AnswerToken(text) if text else None
    return None


def _final(events: Iterator[AssistantEvent]) -> AssistantAnswer:
    answer = None
    for event in events:
        if isinstance(event, TurnFinished):
            answer = event.answer
    assert answer is not None, "every turn ends with TurnFinished"
    return answer
