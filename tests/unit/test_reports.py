"""Renderers and progress: colour only on a terminal without NO_COLOR; progress only after a second."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from fmdoctor.cli.progress import StderrProgress
from fmdoctor.engine.model import CheckError, Finding, Report, RunStats, Severity, Status
from fmdoctor.engine.runner import CheckEvent
from fmdoctor.report import render_json
from fmdoctor.report.markdown import render_markdown
from fmdoctor.report.text import make_console, render_text, write_text


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def sample_report() -> Report:
    return Report(
        cluster="c",
        region="us-west-2",
        generated_at=datetime(2026, 1, 1, tzinfo=UTC),
        status=Status.CRITICAL,
        findings=[
            Finding(check="efa-subnet-spread", severity=Severity.CRITICAL, resource="subnet-1",
                    summary="A very long summary " * 12, evidence={"subnet": "subnet-1", "nodes": list(range(40))},
                    runbook="efa-subnet-spread"),
        ],
        errors=[CheckError(check="placement-group", code="AccessDenied", iam_action="ec2:DescribePlacementGroups",
                           unverified="strategy of placement group pg")],
        stats=RunStats(api_calls={"ec2.DescribeInstances": 1}, duration_s=0.5, checks_run=["efa-subnet-spread"]),
    )


def test_text_wraps_to_80_and_shows_errors():
    text = render_text(sample_report())
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "COULD NOT VERIFY" in text and "needs ec2:DescribePlacementGroups" in text
    assert "nodes: 0, 1, 2 (+37 more)" in text


def test_colour_on_tty_unless_no_color(monkeypatch):
    tty = FakeTty()
    write_text(sample_report(), make_console(tty))
    assert "\x1b[" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    tty = FakeTty()
    write_text(sample_report(), make_console(tty))
    assert "\x1b[" not in tty.getvalue()


def test_json_and_markdown_carry_finding_ids():
    assert '"id": "efa-subnet-spread/subnet-1"' in render_json(sample_report())
    md = render_markdown(sample_report())
    assert "## Could not verify" in md and "`ec2:DescribePlacementGroups`" in md


def test_progress_waits_a_second_then_reports():
    stream = io.StringIO()
    progress = StderrProgress(stream=stream, delay_s=1.0)
    progress(CheckEvent("efa-subnet-spread", "finished", findings=1, done=1, total=2))
    assert stream.getvalue() == ""  # a fast run prints nothing
    progress.started -= 5
    progress(CheckEvent("placement-group", "finished", findings=2, done=2, total=2, duration_s=1.2))
    assert stream.getvalue() == "fmdoctor: [2/2] placement-group: 2 findings (1.2s)\n"
