"""Captured outputs of real node types give the verdicts NVIDIA and AWS document, and record/replay round-trips.

Each scenario is what one node answers (tests/fixtures/node, sources in its README): an H100 p5.48xlarge, an H200
p5en.48xlarge with Xid 119, an A100 p4d.24xlarge with a pending row remap, an L40S g6e.xlarge, a Trainium
trn1.32xlarge, a V100 p3dn.24xlarge with pages pending retirement and a CPU c6i.2xlarge.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fmdoctor.cli.check_cmd import demo_recording
from fmdoctor.cli.main import main
from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.model import Report, Severity, Status
from fmdoctor.node import gpu_memory, recording
from fmdoctor.node.replay import ReplayHost, files_from_head

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node"
MEMORY = " ".join(gpu_memory.COMMAND)
QUIET = (0, "-- No entries --\n", "")
NODE_IDS = ("node-gpu-health", "gpu-xid", "node-efa-provider")
SYS_NO_RDMA = {"/sys/class": ["block", "net", "pci_bus"]}


def out(name: str):
    return (0, (FIXTURES / name).read_text(), "")


def one_efa():
    """p3dn.24xlarge has one EFA: the first RDM entry of the p4d capture."""
    return (0, "\n".join((FIXTURES / "fi_info-efa-p4d.txt").read_text().splitlines()[:6]) + "\n", "")


SCENARIOS = {
    "h100-p5": dict(instance_type="p5.48xlarge", now=datetime(2025, 3, 4, 3, 0, tzinfo=UTC), commands={
        "nvidia-smi": out("nvidia-smi-p5-healthy.csv"), MEMORY: out("nvidia-smi-q-memory-h100-healthy.txt"),
        "journalctl": QUIET, "fi_info": out("fi_info-efa-p5.txt")}),
    "h200-p5en": dict(instance_type="p5en.48xlarge", now=datetime(2025, 2, 23, 16, 31, tzinfo=UTC), commands={
        "nvidia-smi": out("nvidia-smi-h200-p5en.csv"), MEMORY: out("nvidia-smi-q-memory-h200-healthy.txt"),
        "journalctl": out("journalctl-h200-xid119.log"), "fi_info": out("fi_info-efa-p5en.txt")}),
    "a100-p4d": dict(instance_type="p4d.24xlarge", now=datetime(2023, 6, 7, 19, 32, 16, tzinfo=UTC), commands={
        "nvidia-smi": out("nvidia-smi-a100-p4d.csv"), MEMORY: out("nvidia-smi-q-memory-a100-pending.txt"),
        "journalctl": out("journalctl-a100-xid63.log"), "fi_info": out("fi_info-efa-p4d.txt")}),
    "l40s-g6e": dict(instance_type="g6e.xlarge", now=datetime(2026, 7, 3, 8, 34, tzinfo=UTC), commands={
        "nvidia-smi": out("nvidia-smi-l40s-g6e.csv"), MEMORY: out("nvidia-smi-q-memory-l40s-healthy.txt"),
        "journalctl": QUIET}),
    "trn1": dict(instance_type="trn1.32xlarge", now=datetime(2025, 3, 4, 3, 0, tzinfo=UTC), commands={
        "neuron-ls": out("neuron-ls-trn1.json"), "journalctl": QUIET, "fi_info": out("fi_info-efa-trn1.txt")}),
    "v100-p3dn": dict(instance_type="p3dn.24xlarge", now=datetime(2025, 3, 3, 11, 3, tzinfo=UTC), commands={
        "nvidia-smi": out("nvidia-smi-v100-p3dn.csv"), MEMORY: out("nvidia-smi-q-memory-v100-retired.txt"),
        "journalctl": QUIET, "fi_info": one_efa()}),
    "cpu-c6i": dict(instance_type="c6i.2xlarge", now=datetime(2025, 3, 4, 3, 0, tzinfo=UTC), commands={
        "journalctl": QUIET}, files=files_from_head((FIXTURES / "pci-uevents-c6i.txt").read_text()),
        dirs=SYS_NO_RDMA),
}


def host_for(name: str) -> ReplayHost:
    s = SCENARIOS[name]
    return ReplayHost(s["commands"], files=s.get("files"), dirs=s.get("dirs"), instance_type=s["instance_type"],
                      name=f"node-{name}")


def run(name: str, host=None) -> Report:
    now = SCENARIOS[name]["now"]
    return Doctor(settings=Settings(), clock=lambda: now).check_local(host=host or host_for(name))


def verdicts(report: Report) -> dict[str, object]:
    """check id -> the worst severity it found, 'ok', or 'n/a' (skipped)."""
    result: dict[str, object] = {s.check: "n/a" for s in report.skipped if s.check in NODE_IDS}
    for check in (c for c in report.stats.checks_run if c in NODE_IDS):
        found = [f.severity for f in report.findings if f.check == check]
        result[check] = max(found, key=lambda s: s.rank) if found else "ok"
    return result


def test_h100_p5_healthy():
    report = run("h100-p5")
    assert verdicts(report) == {"node-gpu-health": "ok", "gpu-xid": "ok", "node-efa-provider": "ok"}
    assert report.status is Status.OK and report.errors == []


def test_h200_p5en_xid_119_needs_a_gpu_reset():
    report = run("h200-p5en")
    assert verdicts(report) == {"node-gpu-health": "ok", "gpu-xid": Severity.CRITICAL, "node-efa-provider": "ok"}
    [xid] = report.findings
    assert (xid.evidence["pci"], xid.evidence["gpu_index"], xid.evidence["resolution"]) == ("PCI:0000:97:00", 4,
                                                                                            "RESET_GPU")
    assert xid.evidence["xids"][0]["count"] == 5 and xid.evidence["xids"][0]["name"] == "GSP_RPC_TIMEOUT"


def test_a100_p4d_pending_remap_is_a_warning_and_its_xid_63_is_info():
    report = run("a100-p4d")
    assert verdicts(report) == {"node-gpu-health": Severity.WARNING, "gpu-xid": Severity.INFO,
                                "node-efa-provider": "ok"}
    health = next(f for f in report.findings if f.check == "node-gpu-health")
    assert health.evidence["gpu_index"] == 0 and health.evidence["action"] == "reset"
    assert report.status is Status.WARNING


def test_l40s_g6e_healthy_gets_no_warning():
    report = run("l40s-g6e")
    assert verdicts(report) == {"node-gpu-health": "ok", "gpu-xid": "ok", "node-efa-provider": "n/a"}
    assert report.status is Status.OK and report.errors == [] and report.findings == []


def test_trainium_trn1_counts_neuron_devices_and_efa():
    report = run("trn1")
    assert verdicts(report) == {"node-gpu-health": "ok", "gpu-xid": "n/a", "node-efa-provider": "ok"}
    assert report.status is Status.OK and report.errors == []


def test_v100_p3dn_pages_pending_retirement():
    report = run("v100-p3dn")
    assert verdicts(report) == {"node-gpu-health": Severity.WARNING, "gpu-xid": "ok", "node-efa-provider": "ok"}


def test_cpu_node_of_an_unknown_type_is_not_applicable_everywhere_and_fails_nothing():
    report = run("cpu-c6i")
    assert verdicts(report) == {"node-gpu-health": "n/a", "gpu-xid": "n/a", "node-efa-provider": "n/a"}
    assert report.findings == [] and report.errors == []
    reasons = {s.check: s.reason for s in report.skipped}
    assert "no NVIDIA GPU on the PCI bus" in reasons["node-gpu-health"]
    assert "not among the instance types AWS lists as supporting EFA" in reasons["node-efa-provider"]
    # every node check was not applicable; IMDS answered that no Spot interruption is announced
    assert report.status is Status.OK


# --- --record / --replay --------------------------------------------------------------------------------------

def comparable(report: Report) -> dict[str, object]:
    data = json.loads(report.model_dump_json())
    data["stats"].pop("duration_s")
    return data


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_recording_replays_to_the_same_report(name, tmp_path):
    recorder = recording.RecordingHost(host_for(name))
    live = run(name, recorder)
    recorder.save(tmp_path / name, live.generated_at)
    replayed_host, recorded_at = recording.load(tmp_path / name)
    replayed = Doctor(settings=Settings(), clock=lambda: recorded_at).check_local(host=replayed_host)
    assert recorded_at == SCENARIOS[name]["now"] and replayed_host.name == f"node-{name}"
    assert comparable(replayed) == comparable(live)


def test_the_demo_recording_round_trips(tmp_path):
    host, recorded_at = recording.load(demo_recording())
    doctor = Doctor(settings=Settings(), clock=lambda: recorded_at)
    first = doctor.check_local(host=host)
    again = recording.RecordingHost(recording.load(demo_recording())[0])
    second = doctor.check_local(host=again)
    again.save(tmp_path / "again", second.generated_at)
    third = doctor.check_local(host=recording.load(tmp_path / "again")[0])
    assert comparable(first) == comparable(second) == comparable(third)
    assert first.status is Status.CRITICAL and {f.check for f in first.findings} == {
        "node-gpu-health", "gpu-xid", "node-efa-provider"}
    original = json.loads((demo_recording() / "manifest.json").read_text())
    copy = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert copy == original  # the same questions, the same answers, the same files
    for entry in original["commands"]:
        for stream in ("stdout", "stderr"):
            assert (tmp_path / "again" / entry[stream]).read_text() == (demo_recording() / entry[stream]).read_text()


def test_a_question_the_node_was_never_asked_is_not_verified(tmp_path):
    shutil.copytree(demo_recording(), tmp_path / "demo")
    manifest = json.loads((tmp_path / "demo" / "manifest.json").read_text())
    manifest["commands"] = [c for c in manifest["commands"] if c["argv"][0] != "fi_info"]
    (tmp_path / "demo" / "manifest.json").write_text(json.dumps(manifest))
    host, recorded_at = recording.load(tmp_path / "demo")
    report = Doctor(settings=Settings(), clock=lambda: recorded_at).check_local(only=["node-efa-provider"], host=host)
    assert report.findings == [] and [e.code for e in report.errors] == ["Unverified"]
    assert "fi_info -p efa` is not in the recording" in report.errors[0].message


@pytest.mark.parametrize("tamper, message", [
    (lambda m: m["commands"][0].update(stdout="../../../../etc/passwd"), "points outside the recording"),
    (lambda m: m.update(format="something-else/9"), "is not an fmdoctor node recording"),
    (lambda m: m.pop("commands"), "malformed recording"),
])
def test_a_recording_is_data_and_is_checked_before_it_is_replayed(tmp_path, tamper, message):
    shutil.copytree(demo_recording(), tmp_path / "demo")
    manifest = json.loads((tmp_path / "demo" / "manifest.json").read_text())
    tamper(manifest)
    (tmp_path / "demo" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(recording.RecordingError, match=message):
        recording.load(tmp_path / "demo")


def test_cli_replay_record_and_demo(capsys, tmp_path):
    code = main(["check", "--local", "--demo", "--format", "json", "--no-progress", "--record", str(tmp_path / "r")])
    demo = json.loads(capsys.readouterr().out)
    assert code == 2 and demo["cluster"] == "node/ip-10-0-1-23" and demo["status"] == "critical"
    code = main(["check", "--replay", str(tmp_path / "r"), "--format", "json", "--no-progress"])
    replayed = json.loads(capsys.readouterr().out)
    assert code == 2 and replayed["findings"] == demo["findings"]
    assert main(["check", "--replay", str(tmp_path / "nothing-here"), "--no-progress"]) == 3
    assert "fmdoctor check --local --record DIR" in capsys.readouterr().err
    assert main(["check", "--record", str(tmp_path / "x"), "--cluster", "c", "--no-progress"]) == 3
