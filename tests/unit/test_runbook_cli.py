"""``fmdoctor runbook list|show`` in-process: a finding, a whole report, stdin, and the finding-less view."""

from __future__ import annotations

import io
import json

import pytest

from fmdoctor.cli.main import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def demo_json(demo_check):
    return demo_check.report.to_json_dict()


def test_list_text_and_json(capsys):
    code, out, _ = run(capsys, "runbook", "list")
    assert code == 0 and "efa-sg-self-reference  [critical, automated fix]" in out
    code, out, _ = run(capsys, "runbook", "list", "--format", "json")
    entries = {e["id"]: e for e in json.loads(out)}
    assert entries["efa-sg-self-reference"]["remediation_iam_actions"] == [
        "ec2:AuthorizeSecurityGroupIngress", "ec2:AuthorizeSecurityGroupEgress"]
    assert entries["efa-subnet-spread"]["automated"] is False


def test_show_with_a_whole_report_picks_the_runbooks_finding(capsys, tmp_path, demo_json):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(demo_json))
    code, out, _ = run(capsys, "runbook", "show", "efa-not-attached", "--finding", f"@{path}")
    [finding] = [f for f in demo_json["findings"] if f["check"] == "efa-not-attached"]
    assert code == 0
    assert f"--instance-ids {finding['resource']}" in out
    assert "cluster `demo-llm-train` (us-west-2)" in out and "--region us-west-2" in out


def test_show_with_one_finding_inline_and_on_stdin(capsys, monkeypatch, demo_json):
    [finding] = [f for f in demo_json["findings"] if f["check"] == "efa-sg-self-reference"]
    code, out, _ = run(capsys, "runbook", "show", "efa-sg-self-reference", "--finding", json.dumps(finding),
                       "--cluster", "prod", "--region", "eu-west-1")
    assert code == 0 and f"--group-id {finding['resource']}" in out and "--region eu-west-1" in out
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(demo_json)))
    code, out, _ = run(capsys, "runbook", "show", "efa-sg-self-reference", "--finding", "-", "--format", "json")
    assert code == 0 and finding["resource"] in json.loads(out)["markdown"][0]


def test_show_without_a_finding_explains_what_each_value_needs(capsys):
    code, out, _ = run(capsys, "runbook", "show", "efa-missing-interfaces")
    assert code == 0
    assert "--instance-ids ⟨evidence.instance⟩" in out
    assert "fmdoctor check --cluster NAME --only efa-missing-interfaces --format json | " in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["runbook", "show", "efa-sg-self-refrence"], "did you mean efa-sg-self-reference"),
        (["runbook", "show", "efa-subnet-spread", "--finding", "{not json"], "is not valid JSON"),
        (["runbook", "show", "efa-subnet-spread", "--finding", "@/nonexistent.json"], "cannot read"),
        (["runbook", "show", "efa-subnet-spread", "--finding", '{"findings": []}'], "has no finding for runbook"),
        (["runbook", "show", "efa-subnet-spread", "--finding", '{"check": "efa-subnet-spread"}'], "not a finding"),
    ],
)
def test_bad_input_exits_3_with_one_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 3 and message in err and "Traceback" not in err and out == ""


def test_finding_for_another_runbook_is_refused(capsys, demo_json):
    [finding] = [f for f in demo_json["findings"] if f["check"] == "placement-group"]
    code, _, err = run(capsys, "runbook", "show", "efa-subnet-spread", "--finding", json.dumps(finding))
    assert code == 3 and "the finding has no finding for runbook efa-subnet-spread" in err
    assert "placement-group (placement-group)" in err


def test_user_runbook_dir_from_the_config(capsys, tmp_path):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "team-gpu.md").write_text(
        "---\nid: team-gpu\ntitle: Our GPU procedure\nchecks: [placement-group]\nseverity: info\n---\n"
        "## What it means\n{{ evidence.instance }}\n## Confirm by hand\n## Fix\n## Verify\n")
    config = tmp_path / "fmdoctor.yaml"
    config.write_text("runbooks_dir: books\n")
    code, out, _ = run(capsys, "runbook", "list", "--config", str(config))
    assert code == 0 and f"from {tmp_path / 'books' / 'team-gpu.md'}" in out
    (tmp_path / "books" / "team-gpu.md").write_text("---\nid: team-gpu\n---\n")
    code, _, err = run(capsys, "runbook", "list", "--config", str(config))
    assert code == 3 and "team-gpu.md: front matter: missing key 'title'" in err
