"""A scripted fake chat model drives the real agent loop: tools, errors, caps, budgets and history."""

from __future__ import annotations

import re
from collections import Counter

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from fmdoctor.assistant import AnswerToken, Assistant, CheckProgress, ToolFinished, ToolStarted, TurnFinished
from fmdoctor.assistant.backends import Backends
from fmdoctor.assistant.digest import parse
from fmdoctor.assistant.safety import undelimit
from fmdoctor.config import AgentSettings
from fmdoctor.engine.errors import UsageError

from .conftest import call, scripted


def _tool_messages(model, index=-1):
    return [m for m in model.received[index] if isinstance(m, ToolMessage)]


def test_tool_loop_runs_the_check_and_grounds_the_answer(sg_fault_cluster, doctor_for):
    group = sg_fault_cluster.groups["efa"]
    model = scripted(call("check_efa", checks=["efa-sg-self-reference"]),
                     f"EFA traffic is blocked: efa-sg-self-reference/{group} lacks its egress self-rule.")
    assistant = Assistant(doctor_for(), model=model, backends=Backends())
    answer = assistant.ask("is EFA ok?")

    assert model.tool_sets[0] == assistant.tool_names and "check_efa" in assistant.tool_names
    [tool_message] = _tool_messages(model)
    assert tool_message.content.startswith('<tool_output tool="check_efa" nonce="')
    assert f"efa-sg-self-reference/{group}" in undelimit(tool_message.content)
    assert tool_message.artifact["status"] == "success"
    assert answer.citations == [f"efa-sg-self-reference/{group}"] and answer.unverified_citations == []
    [record] = answer.tool_calls
    assert (record.name, record.args, record.status, record.finding_count) == (
        "check_efa", {"checks": ["efa-sg-self-reference"]}, "success", 1)
    assert answer.checks_run == ["efa-sg-self-reference"]  # only=[...] reached the engine
    assert [f["id"] for f in answer.findings] == [f"efa-sg-self-reference/{group}"]


def test_an_answer_citing_what_no_tool_returned_is_flagged(sg_fault_cluster, doctor_for):
    model = scripted(call("check_efa"), "The problem is efa-not-attached/i-0123456789abcdef0.")
    answer = Assistant(doctor_for(), model=model, backends=Backends()).ask("is EFA ok?")
    assert answer.citations == []
    assert answer.unverified_citations == ["efa-not-attached/i-0123456789abcdef0"]


def test_a_failing_tool_returns_an_error_result_and_the_loop_goes_on(sg_fault_cluster, doctor_for, monkeypatch):
    doctor = doctor_for()

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "check", broken)
    model = scripted(call("check_all"), "I could not run the checks.")
    answer = Assistant(doctor, model=model, backends=Backends()).ask("is my cluster healthy?")

    [tool_message] = _tool_messages(model)
    assert tool_message.artifact["status"] == "error"
    assert "internal error in check_all: RuntimeError" in tool_message.content
    assert "Traceback" not in tool_message.content and "boom" not in tool_message.content
    assert answer.answer == "I could not run the checks."
    assert answer.tool_calls[0].status == "error"


def test_an_fmdoctor_error_reaches_the_model_with_its_hint(sg_fault_cluster, doctor_for):
    model = scripted(call("check_all", only=["efa-sg-self-referenc"]), "Unknown check.")
    Assistant(doctor_for(), model=model, backends=Backends()).ask("run that check")
    [tool_message] = _tool_messages(model)
    assert tool_message.artifact["status"] == "error"
    assert "did you mean efa-sg-self-reference" in tool_message.content


def test_invalid_arguments_are_told_to_the_model_and_nothing_runs(sg_fault_cluster, doctor_for, monkeypatch):
    doctor = doctor_for()
    runs = []
    monkeypatch.setattr(doctor, "check", lambda *a, **k: runs.append(a))
    model = scripted(call("check_efa", checks=["no-such-check"]), "Sorry.")
    Assistant(doctor, model=model, backends=Backends()).ask("is EFA ok?")
    [tool_message] = _tool_messages(model)
    assert tool_message.status == "error" and "no-such-check" in str(tool_message.content)
    assert runs == []


def test_an_unknown_tool_is_refused(sg_fault_cluster, doctor_for):
    model = scripted(call("delete_cluster", force=True), "Done.")
    answer = Assistant(doctor_for(), model=model, backends=Backends()).ask("delete it")
    [tool_message] = _tool_messages(model)
    assert tool_message.status == "error"
    assert "delete_cluster" in str(tool_message.content)
    assert all(r.status != "success" for r in answer.tool_calls)


def test_a_looping_model_is_stopped_by_the_cap_and_repeats_are_not_run_again(sg_fault_cluster, doctor_for,
                                                                              monkeypatch):
    doctor = doctor_for()
    real_check, runs = doctor.check, []
    monkeypatch.setattr(doctor, "check", lambda *a, **k: runs.append(1) or real_check(*a, **k))
    model = scripted(*[call("check_efa", f"c{i}") for i in range(12)])
    assistant = Assistant(doctor, settings=AgentSettings(max_tool_calls=3), model=model, backends=Backends())
    answer = assistant.ask("keep checking")

    assert len(runs) == 1  # the identical calls after the first are answered from the question's cache
    assert [r.status for r in answer.tool_calls] == ["success"] * 3 + ["refused"] * 3  # repeats count to the cap
    assert model.tool_sets[3:] == [[], [], []]  # past the cap the model is called without tools
    first, *repeats = _tool_messages(model)[:3]
    assert [undelimit(m.content).splitlines()[-1] for m in repeats] == [
        "repeat of call c0 (same tool and arguments) in this question: its result above still holds; not run again"
    ] * 2
    assert all(len(m.content) < len(first.content) / 2 for m in repeats)  # not the whole result again
    assert answer.answer.startswith("Stopped: the model kept asking for tools past the cap of 3 calls")
    assert f"efa-sg-self-reference/{sg_fault_cluster.groups['efa']}" in answer.answer  # still grounded


def test_identical_calls_in_one_model_message_run_once(sg_fault_cluster, doctor_for, monkeypatch):
    doctor = doctor_for()
    real_check, runs = doctor.check, []
    monkeypatch.setattr(doctor, "check", lambda *a, **k: runs.append(k.get("only")) or real_check(*a, **k))
    both = AIMessage("", tool_calls=[{"name": "check_efa", "args": {}, "id": i, "type": "tool_call"} for i in "ab"]
                     + [{"name": "check_efa", "args": {"checks": ["efa-not-attached"]}, "id": "c",
                         "type": "tool_call"}])
    answer = Assistant(doctor, model=scripted(both, "done"), backends=Backends()).ask("EFA?")
    assert len(runs) == 2  # a and b are the same call (one ran, one waited for it); c differs
    assert sorted(r.status for r in answer.tool_calls) == ["success"] * 3


def test_token_budget_ends_the_turn_with_what_was_found(sg_fault_cluster, doctor_for):
    first = call("check_efa")
    first.usage_metadata = {"input_tokens": 4900, "output_tokens": 20, "total_tokens": 4920}
    model = scripted(first, "never reached")
    settings = AgentSettings(max_turn_tokens=5000)  # the first call's estimate (prompt, tool specs) fits, not two
    answer = Assistant(doctor_for(), settings=settings, model=model, backends=Backends()).ask("x?")
    assert len(model.received) == 1
    assert answer.answer.startswith("Stopped: this question reached its token budget (5000 tokens)")
    assert f"efa-sg-self-reference/{sg_fault_cluster.groups['efa']}" in answer.answer


def test_history_is_kept_per_session_and_windowed(sg_fault_cluster, doctor_for):
    model = scripted("one", "two", "three", "four", "five")
    assistant = Assistant(doctor_for(), settings=AgentSettings(history_turns=2), model=model, backends=Backends())
    assistant.ask("first question in A", "A")
    assistant.ask("only question in B", "B")
    assistant.ask("second question in A", "A")
    assistant.ask("third question in A", "A")

    def questions(index):
        return [m.content for m in model.received[index] if isinstance(m, HumanMessage)]

    assert questions(1) == ["only question in B"]
    assert questions(2) == ["first question in A", "second question in A"]
    assert questions(3) == ["second question in A", "third question in A"]  # window: the last 2 questions
    assistant.reset("A")
    assistant.ask("after reset", "A")
    assert questions(4) == ["after reset"]


def test_streaming_reports_tools_checks_and_answer(demo_doctor):
    assistant = Assistant(demo_doctor, backends=Backends())
    events = list(assistant.stream("is my cluster healthy?", "tui"))

    kinds = [type(e) for e in events]
    assert kinds[0] is ToolStarted and kinds[-1] is TurnFinished
    # the inventory is asked which names the question holds (none here), then the whole cluster is checked
    assert [e.name for e in events if isinstance(e, ToolStarted)] == ["find_names", "check_all"]
    started = [e for e in events if isinstance(e, ToolStarted)][-1]
    finished = [e for e in events if isinstance(e, ToolFinished)][-1]
    assert (started.name, finished.name, finished.call_id) == ("check_all", "check_all", started.call_id)
    answer = events[-1].answer
    assert finished.finding_count == len(answer.findings) >= 5
    assert finished.duration_s > 0 and finished.status == "success"
    progress = [e for e in events if isinstance(e, CheckProgress)]
    assert {e.phase for e in progress} == {"started", "finished"}
    assert {e.check_id for e in progress} == {c.id for c in demo_doctor.registry.select(None)}
    assert kinds.index(ToolFinished) < kinds.index(AnswerToken)
    assert "".join(e.text for e in events if isinstance(e, AnswerToken)).strip() == answer.answer
    assert answer.citations == [f["id"] for f in answer.findings]


def test_an_empty_question_is_bad_input(sg_fault_cluster, doctor_for):
    assistant = Assistant(doctor_for(), model=scripted("x"), backends=Backends())
    try:
        assistant.ask("  \u200b ")
    except UsageError as exc:
        assert exc.exit_code == 3
    else:
        raise AssertionError("an empty question must be refused")


def test_a_model_that_answers_nothing_gets_a_grounded_fallback(sg_fault_cluster, doctor_for):
    model = scripted(call("check_efa"), AIMessage(""))
    answer = Assistant(doctor_for(), model=model, backends=Backends()).ask("is EFA ok?")
    assert answer.answer.startswith("The model gave no answer. What the tools found:")
    # The group's missing egress self-rule, seen by the rule check and by the pairwise EFA reachability.
    group = sg_fault_cluster.groups["efa"]
    assert sorted(answer.citations) == [f"efa-peer-unreachable/{group}", f"efa-sg-self-reference/{group}"]


def test_cancel_ends_the_turn_without_running_more_tools(sg_fault_cluster, doctor_for, monkeypatch):
    import threading

    from .conftest import ScriptedModel

    doctor, cancel = doctor_for(), threading.Event()
    runs = []
    monkeypatch.setattr(doctor, "check", lambda *a, **k: runs.append(a))

    def steps():
        cancel.set()  # the person presses cancel while the model is deciding
        yield call("check_all")
        yield "never reached"

    model = ScriptedModel(messages=steps())
    answer = Assistant(doctor, model=model, backends=Backends()).ask("check everything", cancel=cancel)
    assert [r.status for r in answer.tool_calls] == ["refused"] and runs == []
    assert len(model.received) == 1  # the model is not called again
    assert answer.answer.startswith("Cancelled. What the tools found before that:")


def test_a_result_larger_than_the_limit_drops_nothing_silently(demo_doctor):
    model = scripted(call("check_all"), "Summarised.")
    settings = AgentSettings(max_tool_output_chars=3500)
    answer = Assistant(demo_doctor, settings=settings, model=model, backends=Backends()).ask("is my cluster healthy?")
    [tool_message] = _tool_messages(model)
    body = undelimit(tool_message.content)
    ids = [f["id"] for f in answer.findings]
    lines = [line.split(" | ") for line in body.splitlines()]
    listed = {parts[1] for parts in lines if len(parts) > 2 and parts[0] in ("critical", "warning", "info")}
    named = [i for i in ids if i in listed]  # in finding lines (the incidents at the head name causes too)
    left = re.search(r"left out for lack of room: (\d+) more findings \(([^;]+); by check: ([^)]*)\); "
                     r"list_findings\(offset=(\d+)\) lists them", body)
    assert left is not None and len(ids) >= 20 and 0 < len(named) < len(ids)
    assert int(left[1]) == len(ids) - len(named) and int(left[4]) == len(named)
    rest = [f for f in answer.findings if f["id"] not in named]
    by_check = dict(part.rsplit(" ", 1) for part in left[3].split(", "))
    assert {c: int(n) for c, n in by_check.items()} == dict(Counter(f["check"] for f in rest))
    assert {f["severity"] for f in rest} <= {"warning"} or all(f["severity"] != "warning" for f in answer.findings
                                                              if f["id"] in named)  # the worst were named
    assert f"findings (1-{len(named)} of {len(ids)}, worst first" in body
    unverified = sorted((e["check"], e["code"]) for e in parse(body.splitlines())["errors"])
    assert unverified == sorted((e["check"], e["code"]) for e in answer.errors)  # what could not be seen stays
    assert len(body) <= 3500 + 300  # the limit, give or take the last line
    assert len(tool_message.artifact["findings"]) == len(answer.findings)  # front ends get everything
