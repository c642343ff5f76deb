"""Snapshots of the main screens (pytest-textual-snapshot). Deterministic: a fixed report, a scripted assistant,
a fixed clock, no cursor blink. Update with ``pytest tests/unit/tui/test_snapshots.py --snapshot-update``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from textual.widgets import Input

from fmdoctor.assistant import AssistantAnswer, ToolFinished, ToolStarted, TurnFinished
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import Finding, Report, RunStats, Status
from fmdoctor.engine.runner import CheckEvent
from fmdoctor.tui.fixes import ProposedFix
from fmdoctor.tui.screens.approval import ApprovalScreen

from .conftest import REGION, paste, settle

CLUSTER = "llm-train"
SG = "sg-0123456789abcdef0"
FINDINGS = [
    Finding(check="efa-sg-self-reference", severity="critical", resource=SG, runbook="efa-sg-self-reference",
            summary=f"Security group {SG} does not allow all traffic outbound to itself, so EFA traffic cannot flow",
            evidence={"security_group": SG, "security_group_name": "llm-train-efa", "missing_directions": ["egress"],
                      "rules_considered": [f"ingress -1 from {SG}"], "interface_security_groups": [SG],
                      "peer_security_groups": [SG],
                      "instance_count": 2, "efa_interfaces": 64,
                      "fix": [{"action": "authorize-security-group-egress", "group_id": SG, "ip_protocol": "-1",
                               "peer_group_id": SG}]}),
    Finding(check="placement-group", severity="warning", resource="i-0aaaaaaaaaaaaaaa6", runbook="placement-group",
            summary="gpu-6 (i-0aaaaaaaaaaaaaaa6) is in no placement group while 5 other GPU nodes are in pg-a",
            evidence={"instance_id": "i-0aaaaaaaaaaaaaaa6", "placement_group": None, "expected": "pg-a"}),
    Finding(check="gpu-idle", severity="warning", resource="i-0bbbbbbbbbbbbbbb3", runbook="gpu-idle",
            summary="gpu-3 (i-0bbbbbbbbbbbbbbb3) averaged 2.0% utilization on its 8 GPUs over the last 30m",
            evidence={"instance_id": "i-0bbbbbbbbbbbbbbb3", "average_percent": 2.0, "gpus": 8}),
]
REPORT = Report(cluster=CLUSTER, region=REGION, generated_at=datetime(2026, 12, 3, 9, 30, tzinfo=UTC),
                status=Status.CRITICAL, findings=FINDINGS,
                stats=RunStats(duration_s=1.2, checks_run=["efa-sg-self-reference", "placement-group", "gpu-idle"]))
ANSWER = (f"{CLUSTER} is not healthy: 1 critical and 2 warning findings.\n\n"
          + "\n".join(f"- [{f.severity.value}] {f.id}: {f.summary}" for f in FINDINGS))


class FixedDoctor(Doctor):
    """The engine's interface with a fixed report, so the screens do not change with moto's random ids."""

    def check(self, cluster: str | None = None, only: Any = None, progress: Callable | None = None,
              cancel: threading.Event | None = None) -> Report:
        for n, check in enumerate(REPORT.stats.checks_run, 1):
            if progress:
                progress(CheckEvent(check, "finished", findings=1, done=n, total=3))
        return REPORT


class ScriptedAssistant:
    model_name = "offline"
    model = None

    def stream(self, question: str, session_id: str, cancel: Any = None) -> Iterator[Any]:
        yield ToolStarted("c1", "check_all", {})
        yield ToolFinished("c1", "check_all", {}, "success", 1.2, len(FINDINGS), "3 findings from 3 checks")
        yield TurnFinished(AssistantAnswer(answer=ANSWER, session_id=session_id, model="offline"))


@pytest.fixture
def snapshot_app(app_for: Callable[..., Any]) -> Any:
    doctor = FixedDoctor(settings=Settings.model_validate({"region": REGION, "clusters": {CLUSTER: {}}}),
                         connection=Connection(region=REGION))
    return app_for(doctor, CLUSTER, ScriptedAssistant(), check_on_start=True)


async def _asked(pilot: Any) -> None:
    pilot.app.query_one("#ask", Input).cursor_blink = False
    await settle(pilot)
    await pilot.press("i")
    await paste(pilot, "is my cluster healthy?")
    await pilot.press("enter")
    await settle(pilot)


async def _still(pilot: Any) -> None:
    pilot.app.query_one("#ask", Input).cursor_blink = False
    await settle(pilot)


def test_main_screen_after_a_question(snap_compare, snapshot_app):
    assert snap_compare(snapshot_app, terminal_size=(120, 36), run_before=_asked)


def test_main_screen_at_80x24(snap_compare, snapshot_app):
    assert snap_compare(snapshot_app, terminal_size=(80, 24), run_before=_asked)


def test_finding_with_its_runbook(snap_compare, snapshot_app):
    async def open_first(pilot: Any) -> None:
        await _still(pilot)
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(snapshot_app, terminal_size=(120, 36), run_before=open_first)


def test_main_screen_at_120x40(snap_compare, snapshot_app):
    assert snap_compare(snapshot_app, terminal_size=(120, 40), run_before=_asked)


@pytest.mark.parametrize("size", [(120, 36), (80, 24)], ids=["120x36", "80x24"])
def test_approval_modal(snap_compare, snapshot_app, size):
    fix = ProposedFix(
        target=f"efa-sg-self-reference/{SG}", digest="58dc517cd03a48802059c3f5f61dc7ae",
        calls=({"service": "ec2", "operation": "AuthorizeSecurityGroupEgress",
                "summary": f"allow all traffic out of {SG} to itself",
                "params": {"GroupId": SG, "IpPermissions": [{"IpProtocol": "-1", "UserIdGroupPairs": [
                    {"GroupId": SG}]}]}},),
        preflight={"ok": True, "denied_actions": [], "checks": [
            {"call": {"operation": "AuthorizeSecurityGroupEgress"}, "status": "allowed",
             "detail": "DryRunOperation: the request would have succeeded"}]})

    async def propose(pilot: Any) -> None:
        await _still(pilot)
        await pilot.app.push_screen(ApprovalScreen(fix))
        await pilot.pause()

    assert snap_compare(snapshot_app, terminal_size=size, run_before=propose)


def test_help(snap_compare, snapshot_app):
    async def help_screen(pilot: Any) -> None:
        await _still(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(snapshot_app, terminal_size=(80, 24), run_before=help_screen)
