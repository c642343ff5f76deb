"""The app over the moto demo world, driven with Textual's pilot: ask, findings, filter, sort, runbook, cancel."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from fmdoctor.tui.findings import matches
from fmdoctor.tui.screens.finding import FindingScreen

from .conftest import chat_text, settle

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


async def test_a_question_streams_an_answer_citing_findings_with_its_tool_calls(app_for, demo_doctor,
                                                                               demo_assistant, demo_world):
    app = app_for(demo_doctor, demo_world.cluster, demo_assistant)
    async with app.run_test(size=SIZE) as pilot:
        assert app.focused is app.findings.table  # keys work at once; i goes to the question box
        await pilot.press("i", *"why is training slow?", "enter")
        await settle(pilot)
        text = chat_text(app)
        assert "› why is training slow?" in text
        assert "✓ check_" in text and " findings" in text  # the tool calls, compact: status, time, count
        assert "gpu-straggler/" in text  # the answer cites the straggler finding by its id
        assert not app.query(".streaming")  # the final Markdown replaced the streamed preview
        assert [e.role for e in app.transcript.entries][0] == "you"
        assert app.transcript.entries[-1].role == "fmdoctor" and "gpu-straggler/" in app.transcript.entries[-1].text
        tool = app.query(".tool-call").first()
        assert tool.collapsed
        app.query_one("#chat-log").scroll_to_widget(tool, animate=False, top=True)
        await pilot.pause()
        await pilot.click(tool.query_one("CollapsibleTitle"))
        assert not tool.collapsed and "arguments:" in str(tool.body.render())  # expandable: args and status


async def test_checks_fill_the_table_then_filter_and_sort(app_for, demo_doctor, demo_world):
    app = app_for(demo_doctor, demo_world.cluster, only=["efa"], check_on_start=True)
    expected = demo_doctor.check(demo_world.cluster, only=["efa"])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = app.findings
        assert panel.table.row_count == len(expected.findings) > 3
        assert app.query_one("#header").status == expected.status.value
        assert "checks ·" in str(app.query_one("#progress-checks").render())
        incidents = expected.incidents()
        assert [f.id for f in panel.shown] == [f"{r.check}/{r.resource}" for i in incidents for r in i.findings]
        assert panel.shown[0].id == f"{incidents[0].cause.check}/{incidents[0].cause.resource}"  # most urgent first

        await pilot.press("escape", "slash")  # leave the question box, open the filter
        assert app.focused is app.query_one("#filter", Input)
        await pilot.press(*"critical sg-")
        wanted = [f.id for f in expected.findings if matches(f, "critical sg-")]
        assert wanted and sorted(f.id for f in panel.shown) == sorted(wanted)
        assert panel.table.row_count == len(wanted) < len(expected.findings)

        await pilot.press("enter", "ctrl+a", "backspace")  # back to the table; clear the filter
        app.findings.set_filter("")
        await pilot.press("s")  # sort by the next key: severity, worst first
        assert panel.sort_key == "severity"
        severities = [f.severity.rank for f in panel.shown]
        assert severities == sorted(severities, reverse=True)
        await pilot.press("s")  # then the next column: check
        assert panel.sort_key == "check"
        checks = [f.check for f in panel.shown]
        assert checks == sorted(checks) and panel.table.row_count == len(expected.findings)


async def test_a_selected_finding_shows_its_evidence_and_filled_in_runbook(app_for, demo_doctor, demo_world):
    app = app_for(demo_doctor, demo_world.cluster, only=["efa-sg-self-reference"], check_on_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        [finding] = app.findings.shown
        app.findings.table.focus()
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FindingScreen) and screen.finding == finding
        text = screen.query_one("#runbook").source
        assert finding.resource in text and "**Evidence**" in text
        assert "authorize-security-group-egress" in text  # the runbook's fix, with the real group id
        assert "⟨evidence." not in text  # every placeholder filled from the finding
        await pilot.press("escape")
        assert not isinstance(app.screen, FindingScreen)


async def test_escape_cancels_running_checks_and_the_run_says_so(app_for, demo_doctor, demo_world):
    doctor = type(demo_doctor)(settings=demo_doctor.settings.model_copy(update={"max_workers": 1}),
                               connection=demo_doctor.connection, extras=demo_doctor.extras)
    total = len(doctor.registry.select(None))
    app = app_for(doctor, demo_world.cluster, check_on_start=True)
    async with app.run_test(size=SIZE) as pilot:
        while not app.findings.query_one("#progress").states:  # the first check has started
            await pilot.pause(0.02)
        await pilot.press("escape")
        await settle(pilot)
        summary = str(app.query_one("#progress-checks").render())
        assert summary.endswith("cancelled")
        assert not app.checks_running
        assert app.findings.report is not None and len(app.findings.report.stats.checks_run) < total


async def test_every_action_has_a_command_palette_entry(app_for, demo_doctor, demo_world):
    from fmdoctor.tui.app import ACTIONS

    app = app_for(demo_doctor, demo_world.cluster)
    async with app.run_test(size=SIZE):
        titles = {c.title for c in app.get_system_commands(app.screen)}
    assert {title for _, title, _ in ACTIONS} <= titles
    bound = {b.action for b in app.BINDINGS}
    assert {"rerun", "filter", "fix", "help", "quit", "cancel"} <= bound
