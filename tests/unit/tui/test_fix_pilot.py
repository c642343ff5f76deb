"""Fixes in the app change AWS only after Approve: the assistant's plan and a finding's, approved and rejected,
with the security group read back from moto and every step in the audit log."""

from __future__ import annotations

import pytest

from fmdoctor.tui.screens.approval import ApprovalScreen

from .conftest import chat_text, egress_groups, paste, settle

pytestmark = pytest.mark.anyio
SIZE = (120, 40)
CHECK = "efa-sg-self-reference"


async def _ask_for_the_fix(pilot) -> ApprovalScreen:
    await pilot.press("i")
    await paste(pilot, "fix the EFA security group")
    await pilot.press("enter")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, ApprovalScreen)
    return screen


async def test_approving_the_assistants_plan_applies_it_and_verifies(app_for, sg_doctor, sg_fault, aws, audit):
    group = sg_fault.groups["efa"]
    app = app_for(sg_doctor, sg_fault.cluster)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _ask_for_the_fix(pilot)
        plan = screen.query_one("#plan").source
        assert "ec2.AuthorizeSecurityGroupEgress" in plan and group in plan  # the exact call and its arguments
        assert "every call would succeed" in str(screen.query_one("#dry-run").render())  # the dry run
        assert egress_groups(aws, group) == []  # asking changed nothing
        assert app.focused.id == "reject"  # the safe button has the focus
        await pilot.click("#approve")
        await settle(pilot)
        assert egress_groups(aws, group) == [group]
        text = chat_text(app)
        assert "Fix applied" in text and f"Fixed now: {CHECK}/{group}" in text
        assert app.findings.report is not None  # the checks re-ran after the fix: the group is no longer listed
        assert f"{CHECK}/{group}" not in [f.id for f in app.findings.report.findings]
    events = [e["event"] for e in audit.read()]
    assert events[:2] == ["plan", "preflight"] and events[-3:] == ["approval", "apply", "verify"]
    assert audit.read()[-1]["outcome"] == "verified"
    assert audit.read()[-3]["approval"]["channel"] == "tui"


async def test_rejecting_the_assistants_plan_changes_nothing(app_for, sg_doctor, sg_fault, aws, audit):
    group = sg_fault.groups["efa"]
    app = app_for(sg_doctor, sg_fault.cluster)
    async with app.run_test(size=SIZE) as pilot:
        await _ask_for_the_fix(pilot)
        await pilot.press("n")
        await settle(pilot)
        assert not isinstance(app.screen, ApprovalScreen)
        assert "Not applied" in chat_text(app)
    assert egress_groups(aws, group) == []
    assert "apply" not in [e["event"] for e in audit.read()]
    [declined] = [e for e in audit.read() if e["event"] == "declined"]  # the rejection is on the record
    assert declined["outcome"] == "declined" and declined["plan_digest"]
    assert [e.text for e in app.transcript.entries if e.role == "fix"][0].startswith("Rejected plan")


async def test_fixing_a_selected_finding_approve_then_the_table_refreshes(app_for, sg_doctor, sg_fault, aws, audit):
    group = sg_fault.groups["efa"]
    app = app_for(sg_doctor, sg_fault.cluster, only=[CHECK], check_on_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert [f.id for f in app.findings.shown] == [f"{CHECK}/{group}"]
        await pilot.press("escape", "f")
        await settle(pilot)
        assert isinstance(app.screen, ApprovalScreen) and app.screen.fix.plan is not None
        await pilot.press("y")
        await settle(pilot)
        assert egress_groups(aws, group) == [group]
        assert "Fixed and verified" in chat_text(app)
        assert app.findings.shown == [] and app.query_one("#header").status == "ok"  # the re-run after the fix
    assert [e["event"] for e in audit.read()][-3:] == ["approval", "apply", "verify"]


async def test_rejecting_a_selected_findings_fix_is_audited_and_changes_nothing(app_for, sg_doctor, sg_fault, aws,
                                                                                 audit):
    group = sg_fault.groups["efa"]
    app = app_for(sg_doctor, sg_fault.cluster, only=[CHECK], check_on_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("escape", "f")
        await settle(pilot)
        await pilot.click("#reject")
        await settle(pilot)
        assert "nothing was changed" in chat_text(app)
    assert egress_groups(aws, group) == []
    assert [e["event"] for e in audit.read()] == ["plan", "preflight", "declined"]
