"""Bad input from people and from the machines fmdoctor reads: ids that do not exist, a security group given
where an endpoint is expected, Unicode and 256-character tag values, and IMDS answering nonsense. Each ends
in a clear message (exit 3) or an honest verdict, never a traceback or an 'ok' nobody verified.

(Malformed config files: test_config.py and test_config_fuzz.py; malformed EventBridge/SQS messages and IMDS
Spot replies: test_spot_notices.py, test_spot_checks.py and the fuzz test test_spot_fuzz.py; prompt injection
in tags: assistant/test_injection.py.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fmdoctor.cli.main import main
from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.errors import FmdoctorError, TargetNotFound, UsageError
from fmdoctor.engine.model import Status
from fmdoctor.net.reachability import why_not
from fmdoctor.node.replay import ReplayHost
from fmdoctor.report.text import WIDTH

from ..conftest import CLUSTER, REGION

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node"
UNICODE_CLUSTER = "entraînement-训练-κλάστερ"
LONG_NAME = ("gpu-节点-" + "ü" * 300)[:256]  # EC2's longest tag value, in characters


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small(builder):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    return builder


@pytest.mark.parametrize(("cluster", "argv"), [
    ("no-such-cluster", ["check"]),
    (UNICODE_CLUSTER, ["check", "--format", "json"]),
    ("no-such-cluster", ["why-not", "--from", "gpu-1", "--to", "gpu-2", "--port", "22"]),
])
def test_a_cluster_nobody_tagged_is_one_message_and_exit_3(small, capsys, cluster, argv):
    code, out, err = cli(capsys, *argv, "--cluster", cluster, "--region", REGION)
    if "json" in argv:  # one JSON document on stdout, also when the run cannot start (issue 38)
        assert code == 3 and json.loads(out)["error"]["kind"] == "TargetNotFound"
    else:
        assert code == 3 and out == ""
    assert f"no running or pending instances tagged with cluster {cluster!r}" in err
    assert "tag keys searched" in err and "Traceback" not in err


@pytest.mark.parametrize(("endpoint", "error", "message"), [
    ("i-0123456789abcdef0", TargetNotFound, "i-0123456789abcdef0"),
    ("i-", TargetNotFound, "i-"),
    ("eni-0123456789abcdef0", TargetNotFound, "does not exist"),
    ("sg-0123456789abcdef0", UsageError, "security group"),
    ("s3://no-such-bucket-anywhere", TargetNotFound, "does not exist"),
    ("节点-1", TargetNotFound, "节点-1"),
    ("x" * 5000, TargetNotFound, "is not an instance"),
    ("   ", UsageError, "empty endpoint"),
    ("gpu-node-9", TargetNotFound, "'gpu-node-9' is not an instance, address, interface, file system or s3:// URI"),
], ids=["instance", "bare-i-", "eni", "security-group", "bucket", "unicode-name", "5000-chars", "blank",
        "node-name-not-bucket"])
def test_why_not_endpoints_that_do_not_exist(small, endpoint, error, message):
    doctor = Doctor(settings=Settings(), connection=Connection(region=REGION))
    with pytest.raises(error) as caught:
        why_not(doctor, CLUSTER, "gpu-1", endpoint, 22)
    assert message in str(caught.value) and len(str(caught.value)) < 600  # a 5,000-character id is not echoed whole
    assert "bucket gpu-node-9" not in str(caught.value)  # a bare word is never looked up as a bucket


def test_unicode_cluster_and_256_character_names_survive_every_format(builder, capsys):
    builder.cluster = UNICODE_CLUSTER
    builder.security_group("efa", self_ingress=True)  # no egress self-rule: one critical finding per node
    builder.launch([LONG_NAME, "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4,
                   extra_tags={"team": "研究チーム " + "🚀" * 200})
    common = ("check", "--cluster", UNICODE_CLUSTER, "--region", REGION, "--only", "efa-sg-self-reference")

    code, out, err = cli(capsys, *common, "--format", "json")
    assert code == 2, err
    report = json.loads(out)
    assert report["cluster"] == UNICODE_CLUSTER and report["status"] == "critical"
    assert any(LONG_NAME in json.dumps(f, ensure_ascii=False) for f in report["findings"])

    code, out, _ = cli(capsys, *common)
    assert code == 2 and UNICODE_CLUSTER in out
    assert all(len(line) <= WIDTH for line in out.splitlines())  # wrapped, however long the names

    code, out, _ = cli(capsys, *common, "--format", "markdown")
    assert code == 2 and UNICODE_CLUSTER in out


def _node_commands() -> dict:
    def ok(name: str):
        return (0, (FIXTURES / name).read_text(), "")

    return {"nvidia-smi": ok("nvidia-smi-p5-healthy.csv"), "journalctl": (0, "-- No entries --\n", ""),
            "fi_info": ok("fi_info-efa-p4d.txt"),
            "nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT": ok("nvidia-smi-q-memory-h100-healthy.txt")}


@pytest.mark.parametrize("answer", [
    "<html><body><h1>502 Bad Gateway</h1></body></html>",  # a proxy answering for IMDS
    "p4d.24xlarge\x00garbage",
    "x" * 5000,
])
def test_an_imds_instance_type_that_is_not_one_is_not_a_verified_gpu_or_efa_count(answer):
    doctor = Doctor(settings=Settings(), clock=lambda: datetime(2025, 3, 4, 3, 0, tzinfo=UTC))
    report = doctor.check_local(only=["node-gpu-health", "node-efa-provider"],
                                host=ReplayHost(_node_commands(), instance_type=answer))
    assert {(e.check, e.code) for e in report.errors} == {("node-gpu-health", "UnknownInstanceType"),
                                                          ("node-efa-provider", "UnknownInstanceType")}
    assert all(len(e.message) < 300 for e in report.errors)
    assert report.status is Status.WARNING  # the rest (ECC, memory, provider) was verified; the counts were not


def test_a_known_instance_type_compares_the_counts():
    report = Doctor(settings=Settings()).check_local(only=["node-gpu-health"],
                                                     host=ReplayHost(_node_commands(), instance_type="p5.48xlarge"))
    assert report.errors == [] and report.status is Status.OK


def test_every_bad_input_error_is_an_fmdoctor_error():
    """The classes front ends catch for exit 3 (a guard for the tests above)."""
    assert issubclass(TargetNotFound, FmdoctorError) and issubclass(UsageError, FmdoctorError)


# --- hardening (issue 19, item 11): each of these was a traceback, a silent default or minutes of parsing ---

@pytest.mark.parametrize(("argv", "message"), [
    (["why-not", "--from", "gpu-1", "--to", "s3://"], "not a valid S3 URI"),
    (["check", "--checkpoint", "s3://b-ckpt/x/", "--checkpoint-max-age", "99999999999999999999"], "has no unit"),
    (["check", "--checkpoint", "s3://b-ckpt/x/", "--checkpoint-max-age", "99999999999999999999d"],
     "longer than 3650 days"),
    (["check", "--checkpoint", "s3://b-ckpt/x/", "--checkpoint-max-age", "5"], "write 5s, 5m or 5h"),
    (["check", "--checkpoint", "s3://b-ckpt/x/", "--checkpoint-max-age", "5 m"], "without spaces"),
    (["check", "--only", ""], "--only was given nothing"),
    (["check", "--only", " , "], "--only was given nothing"),
    (["check", "--cluster", "", "--only", "efa"], "--cluster needs a name"),
], ids=["empty-bucket", "huge-bare-number", "huge-duration", "no-unit", "spaced-unit", "empty-only",
        "blank-only", "empty-cluster"])
def test_bad_flags_are_one_message_and_exit_3(small, capsys, argv, message):
    base = ["--region", REGION] + ([] if "--cluster" in argv else ["--cluster", CLUSTER])
    code, out, err = cli(capsys, *argv, *base)
    assert code == 3 and out == "" and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_the_documented_duration_forms_still_work(small, capsys):
    code, out, _ = cli(capsys, "check", "--cluster", CLUSTER, "--region", REGION, "--only", "checkpoint-stale",
                       "--checkpoint", "s3://no-such-ckpt-bucket/x/", "--checkpoint-max-age", "1h30m",
                       "--format", "json")
    assert code in (1, 3) and json.loads(out)["cluster"] == CLUSTER  # it ran (the bucket does not exist)


@pytest.mark.parametrize(("text", "message"), [
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested more than 32 levels"),
    ("".join(" " * i + f"k{i}:\n" for i in range(40)) + " " * 40 + "v: 1\n", "nested more than 32 levels"),
    ("".join(f"k{i}: 1\n" for i in range(700_000)), "a configuration is at most 256 KiB"),
    ("clusters:\n" + "".join(f"  c{i}: {{}}\n" for i in range(21_000)), "more than 20000 keys"),
], ids=["flow-3000-deep", "block-40-deep", "700k-keys", "21k-clusters"])
def test_huge_or_deep_configs_are_refused_before_they_are_parsed(tmp_path, capsys, text, message):
    path = tmp_path / "fmdoctor.yaml"
    path.write_text(text)
    code, out, err = cli(capsys, "iam-policy", "--remediation", "--config", str(path))
    assert code == 3 and message in err and "Traceback" not in err


def test_an_unexpected_error_is_one_line_not_a_traceback(capsys, monkeypatch):
    import fmdoctor.cli.checks_cmd as checks_cmd

    def broken(args):
        raise RuntimeError("boom\x1b[2J")

    monkeypatch.setattr(checks_cmd, "run_list", broken)
    code, out, err = cli(capsys, "checks", "list")
    assert code == 3 and "RuntimeError: boom\\x1b[2J" in err and "Traceback" not in err
