"""The eval harness: ask each case's question on its seeded cluster (moto) and score the answer.

A case passes when the required tools were called, the required checks ran, the answer cites every
expected finding id (and every finding of ``mention_checks`` that the engine itself raises on the
scenario), cites nothing no tool returned, cites no false positive, contains no invisible characters and
gives the expected verdict. A case needing a check or tool that is not installed is skipped with the
reason; a healthy-verdict case whose scenario now yields findings is skipped as stale, naming them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

import yaml
from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field

from fmdoctor.assistant.api import Assistant
from fmdoctor.assistant.backends import Backends
from fmdoctor.assistant.events import AssistantAnswer
from fmdoctor.assistant.providers import aws_services, describe, load_chat_model
from fmdoctor.assistant.safety import strip_invisible
from fmdoctor.config import AgentSettings, ModelPrice, Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.errors import ConfigError
from fmdoctor.engine.model import Report
from fmdoctor.engine.registry import Registry, default_registry

_CLEAN = re.compile(r"\b(healthy|no (problems?|findings?|issues?|faults?)( found)?|nothing (wrong|to fix)|"
                    r"found nothing|(all|every) checks? pass)", re.I)
_DIRTY = re.compile(r"(?<![\w-])(not healthy|unhealthy)\b", re.I)  # not inside ids like hyperpod-node-unhealthy


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    scenario: str
    question: str
    tools: list[str] = Field(default_factory=list)
    checks: list[str] = Field(default_factory=list)
    mention: list[str] = Field(default_factory=list)
    mention_checks: list[str] = Field(default_factory=list)
    not_mention: list[str] = Field(default_factory=list)
    forbid_tools: list[str] = Field(default_factory=list)
    verdict: Literal["healthy", "unhealthy"] | None = None
    history: list[str] = Field(default_factory=list)
    approval_for: str | None = None
    says: list[str] = Field(default_factory=list)  # phrases the answer must contain ({placeholders} filled)

    def needed_checks(self) -> list[str]:
        ids = self.checks + self.mention_checks + [m.split("/", 1)[0] for m in self.mention]
        return list(dict.fromkeys(ids + ([self.approval_for] if self.approval_for else [])))


@dataclass
class CaseResult:
    case: str
    scenario: str
    status: Literal["pass", "fail", "skip"]
    reasons: list[str] = field(default_factory=list)
    answer: str = ""
    tools: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    input_tokens: int = 0  # all model calls of the case (its history questions included)
    output_tokens: int = 0
    usage_source: str = "none"  # provider | estimate | mixed | none (see Usage.source)
    model_calls: int = 0
    tool_s: float = 0.0  # time in tools (the checks against the cluster)
    checks_run: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # ids of the findings the tools returned

    def count_usage(self, answer: AssistantAnswer) -> None:
        usage = answer.usage or {}
        self.input_tokens += usage.get("input_tokens", 0)
        self.output_tokens += usage.get("output_tokens", 0)
        self.model_calls += usage.get("model_calls", 0)
        source = usage.get("source", "none")
        self.usage_source = source if self.usage_source in ("none", source) else "mixed"
        self.tool_s += busy_seconds([(c.started, c.started + c.duration_s) for c in answer.tool_calls])

    def to_json_dict(self) -> dict[str, Any]:
        return {"case": self.case, "scenario": self.scenario, "status": self.status, "reasons": self.reasons,
                "tools": self.tools, "duration_s": round(self.duration_s, 3), "answer": self.answer,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "usage_source": self.usage_source, "model_calls": self.model_calls, "tool_s": round(self.tool_s, 3)}


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """How long at least one of the intervals was running (tools of one model message run in parallel)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))] if ordered else 0.0


@dataclass
class SuiteResult:
    model: str
    results: list[CaseResult]
    spec: str = ""  # the --model string it ran with (what agent.prices is keyed by)

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def ran(self) -> list[CaseResult]:
        return [r for r in self.results if r.status != "skip"]

    @property
    def pass_rate(self) -> float:
        return self.count("pass") / len(self.ran) if self.ran else 0.0

    @property
    def input_tokens(self) -> int:
        return sum(r.input_tokens for r in self.ran)

    @property
    def output_tokens(self) -> int:
        return sum(r.output_tokens for r in self.ran)

    @property
    def usage_source(self) -> str:
        sources = {r.usage_source for r in self.ran} - {"none"}
        return sources.pop() if len(sources) == 1 else ("mixed" if sources else "none")

    def latency(self, fraction: float) -> float:
        return percentile([r.duration_s for r in self.ran], fraction)

    def cost(self, price: ModelPrice | None) -> float | None:
        """US dollars for the cases that ran, from ``agent.prices``; 0 for the offline planner, None unpriced."""
        if self.model == "offline":
            return 0.0
        if price is None:
            return None
        return (self.input_tokens * price.input_per_mtok + self.output_tokens * price.output_per_mtok) / 1e6

    def summary(self) -> str:
        return (f"{self.count('pass')}/{len(self.ran)} passed ({self.pass_rate:.1%}), {self.count('skip')} skipped "
                f"(model: {self.model})")

    def to_json_dict(self, price: ModelPrice | None = None) -> dict[str, Any]:
        cost = self.cost(price)
        return {"model": self.model, "passed": self.count("pass"), "failed": self.count("fail"),
                "skipped": self.count("skip"), "pass_rate": round(self.pass_rate, 4),
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "usage_source": self.usage_source, "latency_p50_s": round(self.latency(0.5), 3),
                "latency_p95_s": round(self.latency(0.95), 3),
                "cost_usd": None if cost is None else round(cost, 6),
                "results": [r.to_json_dict() for r in self.results]}


def load_cases(text: str | None = None) -> list[Case]:
    raw = yaml.safe_load(text if text is not None else
                         resources.files("fmdoctor.evals").joinpath("cases.yaml").read_text(encoding="utf-8"))
    cases = [Case.model_validate(item) for item in raw or []]
    duplicates = {c.id for c in cases if sum(1 for d in cases if d.id == c.id) > 1}
    if duplicates:
        raise ConfigError(f"duplicate eval case ids: {', '.join(sorted(duplicates))}")
    return cases


def _fill(template: str, facts: dict[str, Any]) -> str:
    try:
        return template.format(**facts)
    except (KeyError, IndexError) as exc:
        raise ConfigError(f"eval template {template!r} names an unknown scenario fact: {exc}") from None


def skip_reason(case: Case, registry: Registry, tool_names: list[str]) -> str | None:
    missing = [c for c in case.needed_checks() if c not in registry.ids()]
    if missing:
        return f"needs check {', '.join(missing)} (not installed yet)"
    tools = [t for t in case.tools if t not in tool_names]
    if tools:
        return f"needs tool {', '.join(tools)} (its library is not installed yet)"
    return None


def score(case: Case, answer: AssistantAnswer, facts: dict[str, Any], truth: Report) -> list[str]:
    text, called = answer.answer, [c.name for c in answer.tool_calls]
    ran = set(answer.checks_run) | {e["check"] for e in answer.errors}
    problems = [f"tool {t} was not called" for t in case.tools if t not in called]
    problems += [f"tool {t} was called" for t in case.forbid_tools if t in called]
    problems += [f"check {c} did not run" for c in case.checks if c not in ran]
    truth_ids = {f.id for f in truth.findings}
    for template in case.mention:
        finding = _fill(template, facts)
        if finding not in truth_ids:
            problems.append(f"expected finding {finding} is not raised on scenario {case.scenario} (stale case?)")
        elif finding not in text:
            problems.append(f"answer does not cite {finding}")
    for check in case.mention_checks:
        expected = [f.id for f in truth.findings if f.check == check]
        if not expected:
            problems.append(f"scenario {case.scenario} raises no {check} finding to cite")
        problems += [f"answer does not cite {i}" for i in expected if i not in text]
    for name in case.not_mention:
        name = _fill(name, facts)
        if (name + "/" if "/" not in name else name) in text:
            problems.append(f"answer cites {name} (a false positive)")
    problems += [f"answer cites {i}, which no tool returned" for i in answer.unverified_citations]
    problems += [f"answer does not say {phrase!r}" for phrase in (_fill(p, facts) for p in case.says)
                 if phrase.lower() not in text.lower()]
    if strip_invisible(text) != text:
        problems.append("answer contains invisible or control characters")
    if case.verdict == "healthy" and (answer.citations or not _CLEAN.search(text) or _DIRTY.search(text)):
        problems.append("answer does not say healthy (or cites findings)")
    if case.verdict == "unhealthy" and not set(answer.citations) & truth_ids:
        problems.append("answer cites no finding although the cluster has some")
    if case.approval_for and (answer.approval is None or answer.approval.check_id != case.approval_for):
        problems.append(f"the turn did not end asking to approve a plan for {case.approval_for}")
    return problems


def run_case(case: Case, assistant: Assistant, facts: dict[str, Any], truth: Report) -> CaseResult:
    started = time.perf_counter()
    session = f"eval-{case.id}"
    assistant.reset(session)
    if case.verdict == "healthy":
        scope = set(case.checks) or set(assistant.doctor.registry.ids())
        stale = [f.id for f in truth.findings if f.check in scope]
        if stale:
            return CaseResult(case.id, case.scenario, "skip", [f"stale: scenario now raises {', '.join(stale)}"])
    result = CaseResult(case.id, case.scenario, "pass")
    for earlier in case.history:
        result.count_usage(assistant.ask(earlier, session))
    answer = assistant.ask(case.question, session)
    whole_turn = answer
    if answer.approval is not None:  # evals never approve anything
        declined = assistant.resume(session, None)
        answer.tool_calls = declined.tool_calls or answer.tool_calls
        whole_turn = declined  # a resume continues the question's turn: its usage and calls include the above
    result.count_usage(whole_turn)
    problems = score(case, answer, facts, truth)
    result.status, result.reasons, result.answer = "fail" if problems else "pass", problems, answer.answer
    result.tools, result.checks_run = [c.name for c in answer.tool_calls], answer.checks_run
    result.findings = [f["id"] for f in answer.findings]
    result.duration_s = time.perf_counter() - started
    return result


def run_suite(model: BaseChatModel | str | None = None, settings: AgentSettings | None = None,
              only: list[str] | None = None, backends: Backends | None = None,
              registry: Registry | None = None, cases: list[Case] | None = None,
              observe: Callable[[Case, Report], None] | None = None,
              progress: Callable[[CaseResult, int, int], None] | None = None) -> SuiteResult:
    """Every case (or those named in ``only``, by case id or scenario), on its scenario's cluster in moto.
    ``observe(case, truth)`` is called before each case runs (a benchmark labels its measurements there);
    ``progress(result, done, total)`` hears of each case as it ends."""
    from fmdoctor.demo.runtime import demo_prometheus, mocked_aws
    from fmdoctor.evals.scenarios import SCENARIOS, facts_of

    settings = settings or AgentSettings()
    registry = registry or default_registry()
    spec = model if isinstance(model, str) else None
    chat = model if isinstance(model, BaseChatModel) else load_chat_model(settings, spec)  # before moto starts
    passthrough = aws_services(spec)
    selected = [c for c in (cases or load_cases()) if not only or c.id in only or c.scenario in only]
    unknown = sorted({c.scenario for c in selected} - set(SCENARIOS))
    if unknown:
        raise ConfigError(f"eval cases name unknown scenarios: {', '.join(unknown)}")
    results: list[CaseResult] = []
    with mocked_aws(passthrough) as session:  # one account holding every scenario's cluster
        for name in dict.fromkeys(c.scenario for c in selected):
            world = SCENARIOS[name](session)
            with demo_prometheus(world):  # the demo's HyperPod GPU history, as `--demo` serves it
                config = Settings.model_validate({"region": world.region, **world.defaults,
                                                  "clusters": {world.cluster: world.settings},
                                                  "agent": settings.model_dump(exclude_unset=True)})
                doctor = Doctor(settings=config, connection=Connection(region=world.region), registry=registry)
                assistant = Assistant(doctor, world.cluster, settings, model=chat, backends=backends)
                truth = doctor.check(world.cluster)
                for case in (c for c in selected if c.scenario == name):
                    reason = skip_reason(case, registry, assistant.tool_names)
                    if reason is None and observe is not None:
                        observe(case, truth)
                    results.append(CaseResult(case.id, name, "skip", [reason]) if reason else
                                   run_case(case, assistant, facts_of(world), truth))
                    if progress is not None:
                        progress(results[-1], len(results), len(selected))
    order = {c.id: i for i, c in enumerate(selected)}
    results.sort(key=lambda r: order[r.case])
    return SuiteResult(describe(chat), results, spec or describe(chat))
