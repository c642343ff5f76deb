"""What a newcomer meets first: exit codes and hints of bad input (rejected before the demo is seeded), fixes
without automation, credentials that are missing rather than rejected, and counts that read right."""

from __future__ import annotations

import functools
import re

import pytest

import fmdoctor.cli.check_cmd as check_cmd
import fmdoctor.demo.runtime as demo_runtime
from fmdoctor.cli.main import main
from fmdoctor.cli.progress import StderrProgress
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.errors import CredentialsError

# Every --demo run here only reads the demo: one seeded world serves the module.
pytestmark = pytest.mark.usefixtures("one_demo_per_module")


REGION = "us-west-2"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_demo(monkeypatch):
    """Fails the test if a command seeds the demo: bad input must be refused first."""

    def seeded(*_, **__):
        raise AssertionError("the demo was seeded before the bad input was refused")

    monkeypatch.setattr(demo_runtime, "demo_environment", seeded)


@pytest.mark.parametrize(
    "argv, message, hint",
    [
        (["fix", "--demo", "--check", "efa-sg", "--yes"],
         "unknown check id 'efa-sg'; did you mean efa-sg-self-reference", None),
        (["fix", "--demo", "--check", "efa", "--yes"], "'efa' is a family of checks, not one check id",
         "efa-sg-self-reference"),
        (["check", "--demo", "--only", "gpu-idel"], "did you mean gpu-idle", None),
        (["check", "--demo", "--region", "us-weast-2"], "unknown region 'us-weast-2' (--region)",
         "did you mean us-west-2"),
        (["why-not", "--demo", "--from", "gpu-node-1", "--to", "head", "--port", "22x"], "invalid port '22x'", None),
        (["chat", "--demo", "--only", "nope"], "unknown check id or family 'nope'", None),
        (["check", "--cluster", "x", "--region", REGION, "--endpoint-url", "localhost:5000"],
         "argument --endpoint-url: 'localhost:5000' is not an http(s) URL", "--help"),
    ],
)
def test_bad_input_is_refused_first_with_a_hint(capsys, no_demo, argv, message, hint):
    code, out, err = run(capsys, *argv)
    assert code == 3 and out == "" and "Traceback" not in err
    first, *rest = err.splitlines()
    assert message in first
    if hint:
        assert rest and rest[0].startswith("  hint: ") and hint in rest[0]


def test_a_region_from_the_environment_is_checked_too(capsys, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "eu-wst-1")
    code, _, err = run(capsys, "check", "--cluster", "x")
    assert code == 3 and "unknown region 'eu-wst-1' (AWS_REGION)" in err and "eu-west-1" in err


def test_fix_of_a_check_without_automated_fix_says_follow_the_runbook_and_exits_2(capsys, tmp_path):
    # gpu-idle: one idle node (a finding) and one node without metrics (a partial error) in the demo
    code, out, err = run(capsys, "fix", "--demo", "--check", "gpu-idle", "--yes", "--audit-log",
                         str(tmp_path / "audit.jsonl"))
    assert code == 2, err
    assert "no automated fix (follow the runbook):" in out and "fmdoctor runbook show gpu-idle" in out
    assert "not verified (so not known to be healthy):" in out and "NoMetrics" in out
    assert "grant the read permission" not in out + err


def test_missing_credentials_are_not_called_rejected(capsys, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code, _, err = run(capsys, "check", "--cluster", "x", "--region", REGION)
    assert code == 3 and "no AWS credentials found" in err and "rejected" not in err


def test_credentials_aws_refuses_are_called_rejected(aws, faults):
    faults.fail("ec2", "DescribeInstances", "AuthFailure", "AWS was not able to validate the credentials", 401)
    doctor = Doctor(settings=Settings(), connection=Connection(region=REGION), aws_factory=faults.aws_factory)
    with pytest.raises(CredentialsError, match=r"AWS rejected the credentials \(AuthFailure\)"):
        doctor.check("x")


def test_progress_counts_every_check_once_and_plurals_agree(capsys, monkeypatch):
    monkeypatch.setattr(check_cmd, "StderrProgress", functools.partial(StderrProgress, delay_s=0))
    # the GPU checks and efa-errors each have a partial error in the demo (gpu-node-6 publishes no metrics)
    code, out, err = run(capsys, "check", "--demo", "--only", "gpu,efa-errors")
    # (the demo's HyperPod idle node adds a gpu-idle finding where Debian's prometheus is installed)
    counters = [int(n) for n in re.findall(r"^fmdoctor: \[(\d+)/6\]", err, re.M)]
    assert sorted(counters) == counters == [1, 2, 3, 4, 5, 6]  # the five GPU checks and efa-errors
    assert re.search(r"gpu-idle: (1 finding|[2-9] findings), 1 error \(", err)
    assert re.search(r"efa-errors: 1 finding, 1 error \(", err)
    assert "1 errors" not in err and "1 findings" not in err
    assert "6 checks ·" in out and " API calls ·" in out
    code, out, _ = run(capsys, "check", "--demo", "--only", "placement-group", "--no-progress")
    assert "1 check ·" in out and "1 checks" not in out
