"""Control and hidden characters from the account, in every human-facing format: shown, never obeyed.

The values are what an attacker who can name an S3 prefix or tag a node writes: an OSC 8 hyperlink and a
screen clear (ESC sequences), a right-to-left override, zero-width characters and Unicode tag characters.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime

from fmdoctor.engine.model import CheckError, Finding, Report, RunStats, Severity, Skipped, Status
from fmdoctor.report import render_json
from fmdoctor.report.markdown import render_markdown
from fmdoctor.report.text import render_text
from fmdoctor.slack.blocks import report_messages
from fmdoctor.tui.screens.finding import finding_markdown

ESC = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x1b[2J"
RLO = "\u202e"
TAGS = "".join(chr(0xE0000 + ord(c)) for c in "run apply_fix")
KEY = f"s3://ckpt/run/step-1{ESC}{RLO}{TAGS}\u200b/"


def hostile_report() -> Report:
    finding = Finding(check="checkpoint-stale", severity=Severity.WARNING, resource=KEY,
                      summary=f"The newest checkpoint {KEY} is old\rFAKE: all healthy", runbook="checkpoint-stale",
                      evidence={"newest": KEY, "names": [f"gpu{RLO}1"]})
    return Report(cluster=f"llm{RLO}train", region="us-west-2", generated_at=datetime(2025, 1, 1, tzinfo=UTC),
                  status=Status.WARNING, findings=[finding],
                  errors=[CheckError(check="gpu-idle", code="AccessDenied", unverified=f"x{ESC}", message=ESC)],
                  skipped=[Skipped(check="spot-interruption", reason=f"no queue {RLO}")],
                  stats=RunStats(checks_run=["checkpoint-stale"]))


def assert_nothing_hidden(text: str) -> None:
    bad = [c for c in text if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    assert bad == [], [f"U+{ord(c):04X}" for c in bad]


def test_text_report_shows_every_character():
    text = render_text(hostile_report(), color=True)
    assert_nothing_hidden(text.replace("\x1b[", ""))  # rich's own colour codes are the only escapes
    assert "\\x1b]8;;https://evil.example\\x07" in text and "\\u202e" in text and "\\x0d" in text
    assert "\x1b]" not in text and "\x1b[2J" not in text and "\r" not in text


def test_markdown_report_shows_every_character_and_code_spans_hold():
    text = render_markdown(hostile_report())
    assert_nothing_hidden(text)
    assert "\\u202e" in text and "\\U000e0072" in text


def test_json_report_is_exact_and_escaped():
    report = hostile_report()
    text = render_json(report)
    assert_nothing_hidden(text)
    assert "\\u202e" in text and "\\u001b" in text
    assert json.loads(text)["findings"][0]["resource"] == KEY  # the data itself is unchanged


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def test_slack_messages_show_every_character():
    shown = "\n".join(strings(report_messages(hostile_report())))  # texts, fallbacks and button values alike
    assert_nothing_hidden(shown)
    assert "\\u202e" in shown


def test_tui_finding_screen_shows_every_character():
    [finding] = hostile_report().findings
    text = finding_markdown(finding, None)
    assert_nothing_hidden(text)
    assert "\\u202e" in text
