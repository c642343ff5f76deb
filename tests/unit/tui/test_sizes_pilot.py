"""The app at 80x24 and 120x40: the fix dialog's buttons and dry run on screen, ids cut with an ellipsis and the
summary in view, the last error kept in the findings pane, Esc back to the table, and a quick clean quit."""

from __future__ import annotations

import io
import threading
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from textual.geometry import Region
from textual.widgets import Button, DataTable, Input, Static

from fmdoctor.assistant import AssistantAnswer, TurnFinished
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.engine.model import Finding, Report, RunStats, Status
from fmdoctor.tui.fixes import ProposedFix
from fmdoctor.tui.screens.approval import ApprovalScreen

from .conftest import REGION, paste, settle

pytestmark = pytest.mark.anyio
SIZES = [(80, 24), (120, 40)]
SG = "sg-0123456789abcdef0"
S3 = "s3://demo-llm-train-checkpoints/llama-70b/run-0412/step-002400/"
FINDINGS = [
    Finding(check="checkpoint-incomplete", severity="critical", resource=S3, runbook="checkpoint-incomplete",
            summary=f"The newest checkpoint {S3} looks incomplete (3 files of step-002200 missing)"),
    Finding(check="spot-interruption-unprotected", severity="critical", resource="i-0123456789abcdef3",
            runbook="spot-interruption-unprotected", summary="gpu-node-3 will be terminated by EC2 Spot in 2m"),
    Finding(check="spot-interruption", severity="critical", resource="i-0123456789abcdef3",
            runbook="spot-interruption", summary="gpu-node-3 will be terminated by EC2 Spot in 2m"),
]
REPORT = Report(cluster="llm-train", region=REGION, generated_at=datetime(2026, 12, 3, tzinfo=UTC),
                status=Status.CRITICAL, findings=FINDINGS, stats=RunStats(duration_s=1.0, checks_run=["a", "b"]))


class FlakyDoctor(Doctor):
    """Fails its first run (an unknown cluster), then answers with a fixed report."""

    runs: int = 0

    def check(self, cluster: str | None = None, **kwargs: Any) -> Report:
        self.runs += 1
        if self.runs == 1:
            raise TargetNotFound("no running or pending instances tagged with cluster 'llm-train'",
                                 hint="tag keys searched: fmdoctor:cluster")
        return REPORT


def _doctor() -> FlakyDoctor:
    return FlakyDoctor(settings=Settings.model_validate({"region": REGION, "clusters": {"llm-train": {}}}),
                       connection=Connection(region=REGION))


def _inside(inner: Region, outer: Region) -> bool:
    return outer.contains_region(inner)


def _long_plan() -> ProposedFix:
    call = {"service": "ec2", "operation": "AuthorizeSecurityGroupEgress", "summary": f"allow all out of {SG}",
            "params": {"GroupId": SG, "IpPermissions": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}]}]}}
    return ProposedFix(target=f"efa-sg-self-reference/{SG}", digest="58dc517cd03a48802059c3f5f61dc7ae",
                       calls=(call,) * 4, preflight={"ok": True, "denied_actions": [], "checks": [
                           {"call": {"operation": "AuthorizeSecurityGroupEgress"}, "status": "allowed",
                            "detail": "DryRunOperation: the request would have succeeded"}] * 4})


@pytest.mark.parametrize("size", SIZES)
async def test_the_fix_dialogs_buttons_and_dry_run_stay_on_screen(app_for, size):
    app = app_for(_doctor(), "llm-train")
    async with app.run_test(size=size) as pilot:
        await app.push_screen(ApprovalScreen(_long_plan()))
        await pilot.pause()
        screen, dialog = app.screen, app.screen.query_one("#approval")
        assert _inside(dialog.region, screen.region)
        for widget in (screen.query_one("#approve", Button), screen.query_one("#reject", Button),
                       screen.query_one("#dry-run", Static)):
            assert _inside(widget.region, dialog.region.shrink((1, 1, 1, 1))), widget  # inside the border
        assert "every call would succeed" in str(screen.query_one("#dry-run", Static).render())
        body = screen.query_one(".dialog-body")
        assert body.max_scroll_y > 0  # the long plan scrolls in its box instead of pushing the buttons off
        await pilot.press("n")
        assert not isinstance(app.screen, ApprovalScreen)


@pytest.mark.parametrize("size", SIZES)
async def test_ids_are_cut_with_an_ellipsis_and_the_summary_is_in_view(app_for, size):
    app = app_for(_doctor(), "llm-train")
    async with app.run_test(size=size) as pilot:
        app.findings.show_report(REPORT)
        await pilot.pause()
        table = app.query_one("#findings-table", DataTable)
        cells = [[str(c) for c in table.get_row_at(n)] for n in range(len(FINDINGS))]
        widths = [column.get_render_width(table) for column in table.columns.values()]
        assert sum(widths) <= table.size.width  # every column, the summary included, is in view
        assert table.columns[table.ordered_columns[3].key].width >= 10
        s3 = next(row for row in cells if row[1].startswith("check"))
        assert "…" in s3[2] and s3[2].startswith("s3://") and s3[2].endswith("/")  # cut in the middle
        assert cells[0][3].endswith("…") or len(cells[0][3]) <= widths[3]
        checks = [row[1] for row in cells]
        assert len(set(checks)) == len(checks)  # two spot checks stay told apart when cut


async def test_the_last_error_stays_in_the_findings_pane_until_the_next_run(app_for):
    app = app_for(_doctor(), "llm-train", check_on_start=True)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot)
        error = app.query_one("#last-error", Static)
        text = str(error.render())
        assert error.display and "Checks failed: no running or pending instances" in text
        assert "tag keys searched" in text  # what to do, too
        assert "could not run" in str(app.query_one("#progress-checks").render())
        app.clear_notifications()  # the toast has gone; the pane still says what happened
        await pilot.pause()
        assert error.display and "Checks failed" in str(error.render())
        await pilot.press("r")
        await settle(pilot)
        assert not error.display and [f.id for f in app.findings.shown][0].startswith("spot-interruption/")


class SlowAssistant:
    """Answers only when told to, so a test can act while the turn is still running."""

    model_name, model = "offline", None

    def __init__(self) -> None:
        self.go = threading.Event()

    def stream(self, question: str, session_id: str, cancel: Any = None) -> Any:
        while not self.go.wait(0.05):
            if cancel is not None and cancel.is_set():
                break
        yield TurnFinished(AssistantAnswer(answer="done", session_id=session_id, model="offline"))


async def test_esc_goes_back_to_the_table_without_cancelling_and_cancels_from_there(app_for):
    assistant = SlowAssistant()
    app = app_for(_doctor(), "llm-train", assistant)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("i")
        await paste(pilot, "is it healthy?")
        await pilot.press("enter")
        await pilot.pause()
        assert app.turn_running and isinstance(app.focused, Input)
        await pilot.press("escape")  # out of the question box: the answer keeps coming
        assert app.focused is app.findings.table and not app.turn_cancel.is_set()
        await pilot.press("tab")
        assert app.focused is not app.findings.table
        app.findings.table.blur()
        await pilot.press("escape")  # from anywhere else too (busy: back to the table first)
        await pilot.press("escape")  # on the table, Esc cancels what runs
        assert app.turn_cancel.is_set()
        await settle(pilot)
        assert not app.turn_running


async def test_quitting_stops_the_checks_under_way(app_for):
    started, seen = threading.Event(), {}

    class BlockingDoctor(FlakyDoctor):
        def check(self, cluster: str | None = None, cancel: threading.Event | None = None, **kwargs: Any) -> Report:
            started.set()
            seen["stopped"] = cancel is not None and cancel.wait(30)  # an AWS call under way sees it at once
            return REPORT

    doctor = BlockingDoctor(settings=_doctor().settings, connection=Connection(region=REGION))
    app = app_for(doctor, "llm-train", check_on_start=True)
    async with app.run_test(size=(80, 24)) as pilot:
        assert started.wait(30)
        await pilot.press("q")
    assert seen == {"stopped": True}


def test_the_demo_notice_is_cleared_from_the_terminal_once_seeded(monkeypatch):
    """No stale 'seeding the demo' line is left on the terminal after the app has gone."""
    import contextlib

    import fmdoctor.demo.runtime as demo_runtime
    from fmdoctor.cli.main import main
    from fmdoctor.tui.app import FmdoctorApp

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    world = SimpleNamespace(region=REGION, cluster="llm-train", settings={}, defaults={})
    monkeypatch.setattr(demo_runtime, "demo_environment", lambda: contextlib.nullcontext(world))
    monkeypatch.setattr(FmdoctorApp, "run", lambda self, *a, **k: None)
    err = Terminal()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["chat", "--demo"]) == 0
    assert err.getvalue() == "\r\x1b[2Kfmdoctor: seeding the demo cluster in moto (a few seconds)…\r\x1b[2K"
