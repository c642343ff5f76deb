"""Per-conversation state the model never sees or writes: latest findings, proposed plans, approvals.

An :class:`AssistantContext` is handed to every tool through LangChain's ``ToolRuntime`` (the agent's
``context_schema``), so tools reach the engine without globals and the model cannot supply any of it:
above all not an approval, which only front-end code creates (:meth:`SessionState.grant`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.assistant.backends import Backends, to_plain
from fmdoctor.config import AgentSettings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.entities import EKS_ARN, cluster_mentions
from fmdoctor.engine.model import Finding, Report


@dataclass
class PendingPlan:
    """A fix plan proposed in this session, waiting for a person's decision."""

    plan: Any
    digest: str
    check_id: str
    resource: str | None = None
    preflight: Any = None

    def to_json_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "check_id": self.check_id, "resource": self.resource,
                "plan": to_plain(self.plan), "preflight": to_plain(self.preflight)}


@dataclass
class ToolCallRecord:
    call_id: str
    name: str
    args: dict[str, Any]
    status: str = "running"
    duration_s: float = 0.0
    finding_count: int = 0
    message: str = ""
    started: float = 0.0  # time.perf_counter() when it started (not in the JSON: only intervals mean anything)

    def to_json_dict(self) -> dict[str, Any]:
        return {"id": self.call_id, "name": self.name, "args": self.args, "status": self.status,
                "duration_s": round(self.duration_s, 3), "finding_count": self.finding_count, "message": self.message}


@dataclass
class Usage:
    """Tokens of one question's model calls: the provider's numbers where it reports them, else estimates."""

    input_tokens: int = 0
    output_tokens: int = 0
    reported_calls: int = 0  # calls whose numbers came from the provider
    estimated_calls: int = 0  # calls the provider reported nothing for (chars/4)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def source(self) -> str:
        if not self.estimated_calls:
            return "provider" if self.reported_calls else "none"
        return "mixed" if self.reported_calls else "estimate"

    def add(self, input_tokens: int, output_tokens: int, reported: bool) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if reported:
            self.reported_calls += 1
        else:
            self.estimated_calls += 1

    def to_json_dict(self) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens, "model_calls": self.reported_calls + self.estimated_calls,
                "source": self.source}


@dataclass
class Turn:
    """One question and everything done to answer it (resumes after an approval belong to the same turn)."""

    question: str
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    executed: int = 0  # tool calls the policy let through, repeats included (the cap counts these)
    model_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    started: float = field(default_factory=time.monotonic)
    # Identical read-only calls in one question are answered from here: tool name + arguments -> (call id, message)
    results: dict[str, tuple[str, Any]] = field(default_factory=dict)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def tokens_used(self) -> int:
        return self.usage.total_tokens

    def call_lock(self, key: str) -> threading.Lock:
        """Held while a call runs, so an identical call made in parallel waits for its result."""
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())


class SessionState:
    def __init__(self, session_id: str):
        self.id = session_id
        self.lock = threading.Lock()  # one turn at a time per conversation
        self.turn: Turn | None = None
        self.plans: dict[str, PendingPlan] = {}
        self._findings: dict[str, list[Finding]] = {}  # check id -> its findings in the latest run of it
        self._reports: dict[str, Report] = {}  # check id -> the latest report that ran it
        self._approvals: dict[str, Any] = {}
        self._data_lock = threading.Lock()

    def remember(self, report: Report) -> None:
        ran = set(report.stats.checks_run) | {e.check for e in report.errors} | {s.check for s in report.skipped}
        with self._data_lock:
            for check in ran:
                self._findings[check] = report.findings_for(check)
                self._reports[check] = report

    def findings(self) -> list[Finding]:
        with self._data_lock:
            return [f for found in self._findings.values() for f in found]

    def has_results(self) -> bool:
        with self._data_lock:
            return bool(self._reports)

    def finding(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings() if f.id == finding_id), None)

    def report_for(self, check_id: str) -> Report | None:
        with self._data_lock:
            return self._reports.get(check_id)

    def region(self) -> str | None:
        with self._data_lock:
            return next((r.region for r in self._reports.values()), None)

    # Approvals: granted by front-end code after a person said yes, consumed by the one call they allow.
    def grant(self, approval: Any) -> None:
        digest = getattr(approval, "plan_digest", None)
        if not isinstance(digest, str) or digest not in self.plans:
            raise ValueError("an approval must name a plan proposed in this session")
        with self._data_lock:
            self._approvals[digest] = approval

    def has_approval(self, digest: Any) -> bool:
        with self._data_lock:
            return isinstance(digest, str) and digest in self._approvals

    def take_approval(self, digest: str) -> Any | None:
        with self._data_lock:
            return self._approvals.pop(digest, None)


@dataclass
class AssistantContext:
    """The agent's runtime context (``create_agent(context_schema=AssistantContext)``)."""

    doctor: Doctor
    cluster: str
    session: SessionState
    settings: AgentSettings = field(default_factory=AgentSettings)
    backends: Backends = field(default_factory=Backends)
    cancel: threading.Event | None = None

    def own_clusters(self) -> tuple[str, ...]:
        """The names this conversation's cluster goes by in its settings: its own, its HyperPod cluster's where that
        differs, and the EKS cluster its kubeconfig context is named after where that context is an EKS ARN (as
        ``aws eks update-kubeconfig`` names it) (the other-cluster guard and find_names both read them here; the
        guard adds what the inventory knows: :func:`fmdoctor.engine.entities.cluster_identities`)."""
        settings = self.doctor.cluster_settings(self.cluster)
        context = settings.scheduler.kubernetes.context or ""
        eks = [m.name for m in cluster_mentions(context) if m.how == EKS_ARN]
        return tuple(dict.fromkeys(n for n in (self.cluster, settings.hyperpod.cluster_name, *eks) if n))
