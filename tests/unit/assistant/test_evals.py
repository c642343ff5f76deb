"""The eval suite: the offline planner passes every case that can run, and the harness can fail an answer."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from fmdoctor.assistant.evaluation import Case, load_cases, run_suite
from fmdoctor.engine.registry import default_registry

from .conftest import ScriptedModel

# End to end, so out of the fast tier (`pytest -m "not e2e"`): the offline planner over every eval case's seeded
# cluster.
pytestmark = [pytest.mark.eval, pytest.mark.e2e]


def test_offline_planner_passes_every_eval_case():
    suite = run_suite()
    failures = [f"{r.case}: {'; '.join(r.reasons)}" for r in suite.results if r.status == "fail"]
    assert failures == []
    assert suite.count("pass") >= 25, suite.summary()
    # Every check a case needs is installed and no scenario has gone stale: nothing may hide behind a skip.
    assert [(r.case, r.reasons) for r in suite.results if r.status == "skip"] == []
    assert suite.pass_rate == 1.0


def test_the_suite_covers_the_common_questions_and_paraphrases():
    cases = load_cases()
    assert len(cases) >= 25
    questions = {c.question.lower() for c in cases}
    for common in ["is my cluster healthy", "why can't i ssh to the head node", "why is training slow",
                   "will i lose work if spot reclaims", "fix the efa security group"]:
        assert common in questions
    assert len({c.scenario for c in cases}) >= 8
    assert any(c.verdict == "healthy" for c in cases) and any(c.history for c in cases)


def test_a_lazy_model_fails_the_cases():
    lazy = ScriptedModel(messages=iter([AIMessage("All good, nothing to worry about.")] * 10))
    cases = [c for c in load_cases() if c.id in ("health-demo", "health-healthy")]
    suite = run_suite(lazy, cases=cases)
    demo, healthy = suite.results
    assert demo.status == "fail" and healthy.status == "fail"
    assert "tool check_all was not called" in demo.reasons
    assert any(r.startswith("answer does not cite efa-sg-self-reference/sg-") for r in demo.reasons)
    assert "answer cites no finding although the cluster has some" in demo.reasons
    assert "tool check_all was not called" in healthy.reasons
    assert suite.pass_rate == 0.0


def test_a_model_that_invents_findings_fails():
    liar = ScriptedModel(messages=iter([AIMessage("", tool_calls=[
        {"name": "check_all", "args": {}, "id": "c1", "type": "tool_call"}]),
        AIMessage("Not healthy: efa-not-attached/i-0123456789abcdef0 has no EFA.")]))
    [result] = run_suite(liar, cases=[c for c in load_cases() if c.id == "health-healthy"]).results
    assert result.status == "fail"
    assert "answer cites efa-not-attached/i-0123456789abcdef0, which no tool returned" in result.reasons
    assert "answer does not say healthy (or cites findings)" in result.reasons


def test_cases_for_checks_not_installed_are_skipped_with_the_reason_and_stale_ones_named():
    cases = [
        Case(id="future", scenario="healthy", question="are my GPUs idle?", checks=["gpu-idle-forever"]),
        Case(id="stale", scenario="demo", question="is my cluster healthy", verdict="healthy"),
        Case(id="tool", scenario="healthy", question="why can't I ssh?", tools=["no_such_tool"]),
    ]
    future, stale, tool = run_suite(cases=cases).results
    assert (future.status, future.reasons) == ("skip", ["needs check gpu-idle-forever (not installed yet)"])
    assert stale.status == "skip" and stale.reasons[0].startswith("stale: scenario now raises efa-sg-self-reference/")
    assert tool.reasons == ["needs tool no_such_tool (its library is not installed yet)"]


def test_every_case_names_real_scenarios_and_known_fields():
    from fmdoctor.evals.scenarios import SCENARIOS

    cases = load_cases()
    assert {c.scenario for c in cases} <= set(SCENARIOS)
    assert len({c.id for c in cases}) == len(cases)
    today = [c for c in cases if all(x in default_registry().ids() for x in c.needed_checks())]
    assert len(today) >= 25


def test_healthy_verdict_is_read_from_words_not_from_check_ids():
    from datetime import UTC, datetime

    from fmdoctor.assistant.evaluation import score
    from fmdoctor.assistant.events import AssistantAnswer
    from fmdoctor.engine.model import Report, Status

    case = Case(id="x", scenario="healthy", question="ok?", verdict="healthy")
    truth = Report(cluster="c", region="us-west-2", generated_at=datetime.now(UTC), status=Status.OK)

    def answer(text):
        return AssistantAnswer(answer=text, session_id="s", model="m")

    assert score(case, answer("c is healthy. Not applicable: hyperpod-node-unhealthy (no cluster)."), {}, truth) == []
    assert score(case, answer("c is not healthy."), {}, truth) == ["answer does not say healthy (or cites findings)"]
    assert score(case, answer("Two nodes are unhealthy."), {}, truth) != []
