"""The CLI in-process: demo run, formats, exit codes and bad input (exit 3, no traceback)."""

from __future__ import annotations

import json

import pytest

from fmdoctor.cli.main import main
from fmdoctor.report.text import WIDTH

DEMO_FINDINGS = {"efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached", "efa-missing-interfaces",
                 "placement-group"}


# Every --demo run here only reads the demo: one seeded world serves the module.
pytestmark = pytest.mark.usefixtures("one_demo_per_module")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_json_contract(capsys):
    code, out, _ = run(capsys, "check", "--demo", "--format", "json", "--no-progress")
    report = json.loads(out)
    assert set(report) >= {"cluster", "region", "generated_at", "status", "findings", "errors", "stats"}
    assert set(report["stats"]) >= {"api_calls", "duration_s"}
    assert report["cluster"] == "demo-llm-train" and report["status"] == "critical" and code == 2
    assert {f["check"] for f in report["findings"]} >= DEMO_FINDINGS
    for finding in report["findings"]:
        assert set(finding) >= {"check", "severity", "resource", "summary", "evidence", "runbook", "id"}
        assert finding["severity"] in {"critical", "warning", "info"}
    assert all(key.count(".") == 1 for key in report["stats"]["api_calls"])


def test_demo_text_fits_80_columns_and_has_no_colour_when_piped(capsys):
    code, out, _ = run(capsys, "check", "--demo", "--no-progress")
    assert code == 2
    assert "CRITICAL" in out and "efa-sg-self-reference" in out
    assert max(len(line) for line in out.splitlines()) <= WIDTH
    assert "\x1b[" not in out
    assert "None" not in out and "placement_group: none\n" in out  # an absent value reads 'none'


def test_only_selects_checks_and_warning_exit(capsys):
    code, out, _ = run(capsys, "check", "--demo", "--only", "efa-missing-interfaces,placement-group",
                       "--format", "json")
    report = json.loads(out)
    assert {f["check"] for f in report["findings"]} == {"efa-missing-interfaces", "placement-group"}
    assert report["status"] == "warning" and code == 1


def test_markdown_format(capsys):
    code, out, _ = run(capsys, "check", "--demo", "--format", "markdown", "--only", "efa")
    assert out.startswith("# fmdoctor: demo-llm-train (us-west-2) is **CRITICAL**")
    assert "| critical | `efa-sg-self-reference` |" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "--demo", "--only", "efa-sg-self-refrence"], "did you mean efa-sg-self-reference"),
        (["check", "--demo", "--format", "yaml"], "invalid choice"),
        (["check", "--no-such-flag"], "unrecognized arguments"),
        (["check"], "no cluster given"),
        (["check", "--config", "/nonexistent/fmdoctor.yaml", "--cluster", "x"], "does not exist"),
    ],
)
def test_bad_input_is_one_message_and_exit_3(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 3
    assert message in err
    assert "Traceback" not in err and out == ""


def test_bad_config_file_names_the_line(capsys, tmp_path):
    config = tmp_path / "fmdoctor.yaml"
    config.write_text("clusters:\n  a:\n    gpu:\n      idle_percent: -4\n")
    code, _, err = run(capsys, "check", "--config", str(config), "--cluster", "a")
    assert code == 3
    assert f"{config}:4: clusters.a.gpu.idle_percent" in err


def test_checks_list(capsys):
    code, out, _ = run(capsys, "checks", "list", "--format", "json")
    entries = {e["id"]: e for e in json.loads(out)}
    assert code == 0 and set(entries) >= DEMO_FINDINGS
    assert "ec2:DescribeSecurityGroupRules" in entries["efa-sg-self-reference"]["iam_actions"]
    code, out, _ = run(capsys, "checks", "list")
    assert "efa-subnet-spread" in out and "IAM: ec2:DescribeInstances" in out
    assert max(len(line) for line in out.splitlines()) <= 80
