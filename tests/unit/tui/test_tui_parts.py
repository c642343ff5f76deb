"""The TUI's plain parts, without a terminal: filter and sort, the transcript, the fix view, error messages,
and how the CLI opens the app."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from fmdoctor.cli import chat_cmd
from fmdoctor.cli import main as cli
from fmdoctor.engine.errors import ConfigError
from fmdoctor.engine.model import Finding
from fmdoctor.tui.errors import explain
from fmdoctor.tui.findings import matches, sort_findings
from fmdoctor.tui.fixes import ProposedFix
from fmdoctor.tui.transcript import Transcript


def _finding(check: str, severity: str, resource: str, summary: str = "s") -> Finding:
    return Finding(check=check, severity=severity, resource=resource, summary=summary, runbook=check)


FINDINGS = [_finding("gpu-idle", "warning", "i-2", "idle GPUs"), _finding("efa-sg-self-reference", "critical", "sg-1"),
            _finding("inference-idle", "info", "endpoint/a"), _finding("efa-subnet-spread", "critical", "subnet-9")]


def test_filter_needs_every_word_in_some_column_case_insensitive():
    assert [f.resource for f in FINDINGS if matches(f, "CRITICAL sg-")] == ["sg-1"]
    assert [f.resource for f in FINDINGS if matches(f, "idle")] == ["i-2", "endpoint/a"]
    assert all(matches(f, "  ") for f in FINDINGS)


def test_sort_worst_first_then_by_column():
    assert [f.check for f in sort_findings(FINDINGS)] == ["efa-sg-self-reference", "efa-subnet-spread", "gpu-idle",
                                                         "inference-idle"]
    assert [f.resource for f in sort_findings(FINDINGS, "resource", reverse=True)] == ["subnet-9", "sg-1", "i-2",
                                                                                       "endpoint/a"]


def test_transcript_is_markdown_with_times_from_the_clock(tmp_path):
    times = iter(datetime(2026, 12, 3, 9, m, tzinfo=UTC) for m in range(10))
    transcript = Transcript("llm-train", clock=lambda: next(times))
    transcript.add("you", "is my cluster healthy?")
    transcript.add("tool", "check_all({}): success, 2 findings, 1.0s")
    transcript.add("fmdoctor", "Not healthy: efa-sg-self-reference/sg-1.")
    path = transcript.save(tmp_path / "deep" / "t.md")
    assert path.read_text() == (
        "# fmdoctor session: llm-train\n\nStarted 2026-12-03 09:00:00 UTC\n\n\n## You (09:00:00)\n\n"
        "is my cluster healthy?\n\n- tool call (09:01:00): check_all({}): success, 2 findings, 1.0s\n\n"
        "## fmdoctor (09:02:00)\n\nNot healthy: efa-sg-self-reference/sg-1.\n")
    assert Transcript("a/b c", clock=lambda: datetime(2026, 1, 2, 3, 4, 5)).default_name() == \
        "fmdoctor-a-b-c-20260102-030405.md"


def test_a_fix_shows_each_exact_call_and_the_dry_run_verdict():
    request = SimpleNamespace(check_id="efa-sg-self-reference", resource="sg-1", plan_digest="ab" * 32,
                              calls=lambda: [{"service": "ec2", "operation": "AuthorizeSecurityGroupEgress",
                                              "params": {"GroupId": "sg-1"}}],
                              preflight={"ok": False, "denied_actions": ["ec2:AuthorizeSecurityGroupEgress"],
                                         "checks": [{"call": {"operation": "AuthorizeSecurityGroupEgress"},
                                                     "status": "denied", "detail": "UnauthorizedOperation"}]})
    fix = ProposedFix.from_request(request)
    text, dry_run = fix.markdown(), fix.dry_run_text()
    assert fix.target == "efa-sg-self-reference/sg-1" and fix.digest == "ab" * 32 and not fix.dry_run_ok
    assert '"GroupId": "sg-1"' in text and "`ec2.AuthorizeSecurityGroupEgress`" in text
    assert dry_run.splitlines()[0] == "Dry run (nothing is changed): THIS WOULD FAIL"
    assert "  ✗ AuthorizeSecurityGroupEgress denied: UnauthorizedOperation" in dry_run
    assert "missing permission: ec2:AuthorizeSecurityGroupEgress" in dry_run
    assert ProposedFix("t", "d", ()).dry_run_text() == "Dry run: none was made (nothing was checked)"


def test_errors_become_a_message_and_what_to_do():
    assert explain(ConfigError("no cluster given", hint="pass --cluster")) == ("no cluster given", "pass --cluster")
    message, hint = explain(NoCredentialsError())
    assert message == "no AWS credentials found" and "AWS_PROFILE" in hint
    denied = ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "not allowed"}},
                         "DescribeInstances")
    message, hint = explain(denied)
    assert message.startswith("AWS refused: UnauthorizedOperation") and "iam-policy" in (hint or "")
    message, hint = explain(RuntimeError("boom"))
    assert message == "unexpected error: RuntimeError: boom" and "-vv" in hint


def test_fmdoctor_alone_prints_help_to_scripts_and_opens_the_app_at_a_terminal(monkeypatch, capsys):
    assert cli.main([]) == 0  # pytest's stdin is not a terminal
    assert "usage: fmdoctor" in capsys.readouterr().out

    opened = []
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    monkeypatch.setattr(chat_cmd, "run", lambda args: opened.append(args) or 0)  # bound when main() builds
    assert cli.main([]) == 0
    [args] = opened
    assert args.command == "chat" and not args.demo and args.cluster is None


def test_chat_without_a_cluster_suggests_the_demo(capsys):
    assert cli.main(["chat"]) == 3
    err = capsys.readouterr().err
    assert "no cluster given" in err and "fmdoctor chat --demo" in err


@pytest.mark.parametrize("argv", [["chat", "--demo", "--model", "bedrock_converse:anthropic.claude"]])
def test_chat_demo_refuses_a_model_that_needs_real_aws(argv, capsys):
    assert cli.main(argv) == 3
    assert "cannot be called from it" in capsys.readouterr().err


def test_chat_refuses_an_unknown_check_before_opening(capsys):
    assert cli.main(["chat", "--cluster", "c", "--region", "us-west-2", "--only", "efa-sg-self-referenc"]) == 3
    assert "efa-sg-self-referenc" in capsys.readouterr().err
