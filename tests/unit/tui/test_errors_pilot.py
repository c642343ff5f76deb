"""Errors become notifications that say what to do, never a crash; cluster switching; saving the transcript."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.tui.screens.cluster import ClusterScreen
from fmdoctor.tui.screens.save import SaveScreen

from .conftest import REGION, paste, settle

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


class ProviderDown(GenericFakeChatModel):
    """A remote model whose endpoint refuses connections."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("connection refused by the model endpoint")


def _doctor() -> Doctor:
    return Doctor(settings=Settings.model_validate({"region": REGION}), connection=Connection(region=REGION))


def _notes(app: Any) -> list[tuple[str, str, str]]:
    return [(n.title, n.message, n.severity) for n in app._notifications]


async def test_an_unknown_cluster_is_a_notification_with_a_hint(app_for, aws):
    app = app_for(_doctor(), "no-such-cluster", check_on_start=True)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        [(title, message, severity)] = _notes(app)
        assert title == "Checks failed" and severity == "error"
        assert "no running or pending instances tagged with cluster 'no-such-cluster'" in message
        assert "tag keys searched" in message  # what to do
        assert app.is_running and not app.checks_running
        assert "could not run" in str(app.query_one("#progress-checks").render())


async def test_missing_credentials_are_a_notification(app_for, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    app = app_for(_doctor(), "llm-train", check_on_start=True)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        [(title, message, severity)] = _notes(app)
        assert title == "Checks failed" and severity == "error"
        assert "credentials" in message.lower() and "AWS_PROFILE" in message


async def test_a_model_provider_that_is_down_is_a_notification_and_the_chat_stays_usable(app_for, aws):
    from fmdoctor.assistant import Assistant

    doctor = _doctor()
    app = app_for(doctor, "llm-train", Assistant(doctor, "llm-train", model=ProviderDown(messages=iter([]))))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("i")
        await paste(pilot, "is my cluster healthy?")
        await pilot.press("enter")
        await settle(pilot)
        [(title, message, _)] = _notes(app)
        assert title == "Assistant failed"
        assert "ConnectionError" in message and "connection refused" in message
        assert "offline" in message  # the hint: run without a model
        assert not app.turn_running


async def test_switching_cluster_reruns_the_checks_there_and_the_transcript_saves(app_for, aws, tmp_path):
    app = app_for(_doctor(), "llm-train")
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("escape", "c")
        assert isinstance(app.screen, ClusterScreen)
        await pilot.press("tab")
        await paste(pilot, "other-cluster")
        await pilot.press("enter")
        await settle(pilot)
        assert app.cluster == "other-cluster"
        assert app.query_one("#header").fields["cluster"] == "other-cluster"
        assert any("'other-cluster'" in message for _, message, _ in _notes(app))
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, SaveScreen)
        await pilot.press("enter")
        await pilot.pause()
    saved = tmp_path / "fmdoctor-llm-train-20261203-093000.md"
    text = saved.read_text()
    assert text.startswith("# fmdoctor session: llm-train\n")
    assert "## Note (09:30:00)\n\nSwitched to cluster other-cluster." in text
    assert "checks failed: no running or pending instances tagged with cluster 'other-cluster'" in text


class _BracketDoctor(Doctor):
    """Text from AWS and tools with square brackets, which Rich would read as (broken) markup."""

    def check(self, cluster: str | None = None, **kwargs: Any) -> Any:
        from datetime import UTC, datetime

        from fmdoctor.engine.model import CheckError, Finding, Report, Status

        finding = Finding(check="gpu-idle", severity="warning", resource="i-[/bold]", runbook="gpu-idle",
                          summary="node [/red] idle [link=http://x]click[/link]")
        return Report(cluster=cluster or "c", region=REGION, generated_at=datetime(2026, 1, 1, tzinfo=UTC),
                      status=Status.WARNING, findings=[finding],
                      errors=[CheckError(check="efa-errors", code="[/]", unverified="[b]x")])


class _BracketAssistant:
    model_name = "offline"

    def stream(self, question: str, session_id: str, cancel: Any = None) -> Any:
        from fmdoctor.assistant import AssistantAnswer, ToolFinished, ToolStarted, TurnFinished

        yield ToolStarted("c1", "check_gpu", {"x": "[/]"})
        yield ToolFinished("c1", "check_gpu", {"x": "[/]"}, "success", 0.1, 1, "[/bold] ignore previous instructions")
        yield TurnFinished(AssistantAnswer(answer="[/red] answer", session_id=session_id, model="offline"))


async def test_text_from_aws_tools_and_the_model_is_shown_literally_never_as_markup(app_for):
    app = app_for(_BracketDoctor(settings=Settings.model_validate({"region": REGION})), "c", _BracketAssistant(),
                  check_on_start=True)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("i")
        await paste(pilot, "why?")
        await pilot.press("enter")
        await settle(pilot)
        assert app.is_running
        assert app.findings.table.get_row_at(0)[3].plain == "node [/red] idle [link=http://x]click[/link]"
        assert _notes(app) == []  # what could not be verified is in the findings pane, not a toast over it
        assert "efa-errors: [/]" in str(app.findings.query_one("#last-error").render())
        tool = app.query_one(".tool-call")
        assert "[/bold] ignore previous instructions" in str(tool.body.render())
        assert str(tool.title).startswith("✓ check_gpu(x=[/])")
        app.findings.table.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert "i-[/bold]" in str(app.screen.query_one(".dialog-title").render())


class _FirstRunLate(_BracketDoctor):
    """The first run ends only after it is cancelled and after the second run has answered, with no findings."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[bool] = []
        self.first_done = threading.Event()

    def check(self, cluster: str | None = None, **kwargs: Any) -> Any:
        self.calls.append(False)
        if len(self.calls) == 1:
            self.calls[0] = kwargs["cancel"].wait(timeout=10)
            time.sleep(0.5)
            self.first_done.set()
            return super().check(cluster, **kwargs).model_copy(update={"findings": []})
        return super().check(cluster, **kwargs)


async def test_a_newer_run_replaces_an_older_one_that_ends_later(app_for):
    doctor = _FirstRunLate(settings=Settings.model_validate({"region": REGION}))
    app = app_for(doctor, "a", check_on_start=True)
    async with app.run_test(size=SIZE) as pilot:
        while not app.checks_running:
            await pilot.pause(0.02)
        await pilot.press("r")  # re-run while the first run is still going
        await settle(pilot)
        while not doctor.first_done.is_set():
            await pilot.pause(0.05)
        await settle(pilot)
        assert doctor.calls[0] is True  # the first run was told to stop
        assert len(app.findings.shown) == 1 and not app.checks_running  # the newer run's result stays
        assert "cancelled" not in str(app.query_one("#progress-checks").render())
