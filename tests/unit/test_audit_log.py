"""The audit log is the record: written to the last byte before AWS is called, never torn, never redirected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fmdoctor.cli.main import main
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.approval import Approval
from fmdoctor.remediation.audit import AuditError, AuditLog
from fmdoctor.remediation.plan import plan_fix

CHECK = "efa-sg-self-reference"


def test_records_are_whole_lines_and_owner_only(tmp_path):
    log = AuditLog(tmp_path / "state" / "audit.jsonl")
    log.record("plan", cluster="c\nINJECTED", note="\u202e")
    log.record("preflight", cluster="c")
    lines = log.path.read_bytes().split(b"\n")
    assert len(lines) == 3 and lines[-1] == b""  # a newline in a value cannot start a record of its own
    assert [r["event"] for r in log.read()] == ["plan", "preflight"]
    assert b"\\u202e" in lines[0] and log.path.stat().st_mode & 0o777 == 0o600


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    (tmp_path / "audit.jsonl").symlink_to(target)
    with pytest.raises(AuditError, match="symbolic link"):
        AuditLog(tmp_path / "audit.jsonl").record("plan")
    assert target.read_text() == "precious\n"


def test_a_world_writable_log_is_refused(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text("")
    path.chmod(0o666)
    with pytest.raises(AuditError, match="writable by everyone"):
        AuditLog(path).record("plan")


@pytest.mark.parametrize("path", ["/dev/full", "/dev/null"])
def test_a_device_is_not_a_log(path):
    with pytest.raises(AuditError, match="not a regular file"):
        AuditLog(path).record("plan")


def test_a_line_torn_before_is_ended_before_the_next_record(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text('{"event": "plan"}\n{"event": "app')
    path.chmod(0o600)
    AuditLog(path).record("verify")
    assert path.read_text().splitlines()[-1].startswith('{"ts"') and path.read_text().endswith("\n")


def test_a_write_cut_short_by_the_disk_leaves_no_torn_line(tmp_path):
    """A real short write: the file-size limit (RLIMIT_FSIZE) stops the write part-way, as a full disk does."""
    path = tmp_path / "audit.jsonl"
    AuditLog(path).record("plan", cluster="c")
    size = path.stat().st_size
    script = f"""
import resource, signal
from fmdoctor.remediation.audit import AuditLog, AuditError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({size + 40}, {size + 40}))
try:
    AuditLog({str(path)!r}).record("approval", cluster="c", calls=["x" * 500])
except AuditError as exc:
    print("refused:", exc.message)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "refused: cannot write the audit log" in done.stdout, done.stderr
    assert path.stat().st_size == size  # the partial line was cut back
    assert [r["event"] for r in AuditLog(path).read()] == ["plan"]


class FailingOn(AuditLog):
    """A disk that fails exactly when one event is written (the ones before it are on disk)."""

    def __init__(self, path: Path, event: str):
        super().__init__(path)
        self.failing = event

    def record(self, event: str, **fields):
        if event == self.failing:
            raise AuditError(f"cannot write the audit log {self.path}: No space left on device")
        return super().record(event, **fields)


@pytest.fixture
def doctor() -> Doctor:
    return Doctor(connection=Connection(region="us-west-2"))


def egress_rules(ec2, group: str) -> list[str]:
    rules = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])["SecurityGroupRules"]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rules if r["IsEgress"])


def test_no_approval_record_means_nothing_is_applied(efa_egress_fault, builder, doctor, tmp_path):
    log = FailingOn(tmp_path / "audit.jsonl", "approval")
    plan = plan_fix(doctor, "test-cluster", CHECK, audit=log)
    before = egress_rules(builder.ec2, efa_egress_fault)
    with pytest.raises(AuditError, match="No space left"):
        apply_fix(doctor, plan, Approval.grant(plan, "alice", "terminal"), audit=log, verify_delays=())
    assert egress_rules(builder.ec2, efa_egress_fault) == before


def test_a_record_that_fails_after_the_change_says_what_was_changed(efa_egress_fault, builder, doctor, tmp_path):
    log = FailingOn(tmp_path / "audit.jsonl", "apply")
    plan = plan_fix(doctor, "test-cluster", CHECK, audit=log)
    with pytest.raises(AuditError, match="AWS was already changed: AuthorizeSecurityGroupEgress applied"):
        apply_fix(doctor, plan, Approval.grant(plan, "alice", "terminal"), audit=log, verify_delays=())
    assert [r["event"] for r in log.read()][-1] == "approval"


@pytest.mark.parametrize("where", ["/dev/full", "file-as-directory"])
def test_fix_with_an_unwritable_log_is_one_message_exit_3_and_nothing_applied(efa_egress_fault, builder, tmp_path,
                                                                              capsys, where):
    if where == "file-as-directory":
        (tmp_path / "plain").write_text("")
        where = str(tmp_path / "plain" / "audit.jsonl")  # its parent is a file: no directory can be made
    before = egress_rules(builder.ec2, efa_egress_fault)
    code = main(["fix", "--cluster", "test-cluster", "--check", CHECK, "--yes", "--audit-log", where,
                 "--region", "us-west-2"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    assert err.startswith("fmdoctor: error: cannot write the audit log") and len(err.strip().splitlines()) == 2
    assert egress_rules(builder.ec2, efa_egress_fault) == before
    assert os.path.exists("/dev/full")
