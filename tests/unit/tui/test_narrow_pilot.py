"""The app at 80x24 over the demo (issue 38): a filtered table shows its matches, the start-up run raises no toast
over the findings (what could not be verified stays in the pane), "Fix…" only where fmdoctor has a fix, and a
fix's result is text that wraps in the chat pane."""

from __future__ import annotations

import pytest
from textual.widgets import Button, DataTable

from fmdoctor.engine.model import Finding
from fmdoctor.tui import fixes
from fmdoctor.tui.screens.finding import FindingScreen

from .conftest import paste, settle

pytestmark = pytest.mark.anyio


async def test_at_80x24_a_filtered_table_shows_its_matches_and_no_toast_covers_it(app_for, demo_doctor, demo_world):
    app = app_for(demo_doctor, demo_world.cluster, check_on_start=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        report = app.findings.report
        assert report is not None and report.errors  # the demo has parts that cannot be verified
        assert list(app._notifications) == []  # no toast at start-up: nothing lies over the table
        assert "could not be verified" in str(app.findings.query_one("#last-error").render())
        await pilot.press("slash")
        await paste(pilot, "gpu-node-3")
        await pilot.press("enter")
        await settle(pilot)
        shown = app.findings.shown
        assert shown and all("gpu-node-3" in f.summary or "gpu-node-3" in f.resource or f.resource.startswith("sg-")
                             for f in shown)
        table = app.findings.query_one(DataTable)
        rows_in_view = table.scrollable_content_region.height - 1  # the header takes a line
        assert rows_in_view >= len(shown), (rows_in_view, len(shown))
        assert table.region.bottom <= app.screen.region.bottom - 1  # above the footer, on screen


FIXABLE = Finding(check="efa-sg-self-reference", severity="critical", resource="sg-0123456789abcdef0",
                  runbook="efa-sg-self-reference", summary="no self-referencing egress rule",
                  evidence={"fix": [{"action": "authorize-security-group-egress", "group_id": "sg-0123456789abcdef0",
                                     "ip_protocol": "-1", "peer_group_id": "sg-0123456789abcdef0"}]})
BY_HAND = Finding(check="efa-subnet-spread", severity="critical", resource="subnet-0123456789abcdef0",
                  runbook="efa-subnet-spread", summary="a node in another zone", evidence={})


@pytest.mark.parametrize("finding, offered", [(FIXABLE, True), (BY_HAND, False)])
async def test_fix_is_offered_only_where_fmdoctor_has_a_fix(app_for, demo_doctor, demo_world, finding, offered):
    app = app_for(demo_doctor, demo_world.cluster)
    async with app.run_test(size=(80, 24)) as pilot:
        chosen: list[str | None] = []
        app.push_screen(FindingScreen(finding, "# runbook", None), chosen.append)
        await pilot.pause()
        assert bool(app.screen.query(Button).filter("#fix")) is offered
        await pilot.press("f")  # the key does what the button would, and nothing where there is none
        await pilot.pause()
        if offered:
            assert chosen == ["fix"]
        else:
            assert chosen == [] and isinstance(app.screen, FindingScreen)
            await pilot.press("escape")
            await pilot.pause()
        app.findings.show_report(None)
        app.action_fix(BY_HAND)  # from the table or the palette: a notice, no plan
        await pilot.pause()
        assert [n.title for n in app._notifications] == ["No automated fix"]


def test_a_fixs_result_is_list_items_that_wrap_not_a_code_block(monkeypatch, tmp_path):
    from fmdoctor.remediation.audit import AuditLog

    long_line = "verified: efa-sg-self-reference no longer reports sg-0123456789abcdef0 " + "x" * 150
    monkeypatch.setattr(fixes, "apply_fix", lambda *a, **k: object())
    monkeypatch.setattr(fixes, "result_lines", lambda result: ["applied 1 of 1 call", long_line])
    fix = fixes.ProposedFix(target="efa-sg-self-reference/sg-0123456789abcdef0", digest="d" * 64, calls=(),
                            plan=object())  # type: ignore[arg-type]
    _, text = fixes.apply(None, fix, AuditLog(tmp_path / "audit.jsonl"))  # type: ignore[arg-type]
    assert "```" not in text
    assert text.splitlines()[:2] == ["- `applied 1 of 1 call`", f"- `{long_line}`"]
