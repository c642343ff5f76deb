"""On-node checks over a host replaying recorded nvidia-smi, kernel-log and fi_info output."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.model import Severity, Status
from fmdoctor.node import nvidia_smi
from fmdoctor.node.replay import ReplayHost

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node"
NOW = datetime(2025, 3, 4, 3, 0, tzinfo=UTC)
NODE_IDS = ["node-gpu-health", "gpu-xid", "node-efa-provider"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def ok(text: str):
    return (0, text, "")


def check(host: ReplayHost, *only: str):
    return Doctor(settings=Settings(), clock=lambda: NOW).check_local(only=list(only) or None, host=host)


def healthy_commands():
    return {
        "nvidia-smi": ok(fixture("nvidia-smi-p5-healthy.csv")),
        "journalctl": ok("-- No entries --\n"),
        "fi_info": ok(fixture("fi_info-efa-p4d.txt")),
    }


# --- all three, healthy ------------------------------------------------------------------------------------

def test_healthy_p4d_node_passes_every_node_check():
    host = ReplayHost(healthy_commands(), instance_type="p4d.24xlarge")
    report = check(host)
    assert report.findings == [] and report.errors == []
    assert report.status is Status.OK and report.stats.checks_run == NODE_IDS
    assert report.stats.api_calls == {}
    # nvidia-smi ran once for both GPU checks, with the exact query the parser expects.
    assert host.ran.count(nvidia_smi.COMMAND) == 1


# --- node-gpu-health ---------------------------------------------------------------------------------------

def test_parse_healthy_csv():
    parsed = nvidia_smi.parse(fixture("nvidia-smi-p5-healthy.csv"))
    assert [g.index for g in parsed.gpus] == list(range(8)) and parsed.unreadable == []
    first = parsed.gpus[0]
    assert (first.utilization, first.memory_used, first.memory_total, first.ecc_uncorrected) == (100, 72315, 81559, 0)
    assert nvidia_smi.pci_key(first.pci_bus_id) == nvidia_smi.pci_key("PCI:0000:53:00") == "53:00"


def test_degraded_p5_missing_gpu_ecc_and_full_memory():
    host = ReplayHost({"nvidia-smi": ok(fixture("nvidia-smi-p5-degraded.csv"))})
    findings = {f.resource: f for f in check(host, "node-gpu-health").findings}
    assert set(findings) == {"node/ip-10-0-1-23", "node/ip-10-0-1-23/gpu/2", "node/ip-10-0-1-23/gpu/3"}
    count = findings["node/ip-10-0-1-23"]
    assert count.severity is Severity.CRITICAL
    assert (count.evidence["gpus_seen"], count.evidence["expected_gpus"]) == (7, 8)
    ecc = findings["node/ip-10-0-1-23/gpu/2"]
    assert ecc.severity is Severity.CRITICAL and ecc.evidence["ecc_uncorrected"] == 2
    memory = findings["node/ip-10-0-1-23/gpu/3"]
    assert memory.severity is Severity.WARNING and memory.evidence["memory_percent"] == 99.2


def test_lost_gpu_and_unreadable_line_on_p4d():
    host = ReplayHost({"nvidia-smi": (15, fixture("nvidia-smi-lost-gpu.csv"), "")}, instance_type="p4d.24xlarge")
    [finding] = check(host, "node-gpu-health").findings
    assert finding.evidence["lost"] == [{"index": 2, "pci_bus_id": "00000000:20:1C.0", "state": "[GPU requires reset]"}]
    assert finding.evidence["unreadable"] == [
        "Unable to determine the device handle for GPU0000:90:1C.0: Unknown Error"]
    assert "sees 6 working GPUs of its 8" in finding.summary


@pytest.mark.parametrize(
    "answer, instance_type, expected",
    [
        (None, "p5.48xlarge", "not installed"),
        ((9, fixture("nvidia-smi-driver-failure.txt"), ""), "p5.48xlarge", "couldn't communicate with the NVIDIA"),
        ((124, "", "timed out after 15.0s"), "p5.48xlarge", "did not answer"),
    ],
    ids=["missing", "driver-failure", "hang"],
)
def test_nvidia_smi_missing_failing_or_hanging_is_critical(answer, instance_type, expected):
    host = ReplayHost({"nvidia-smi": answer} if answer else {}, instance_type=instance_type)
    [finding] = check(host, "node-gpu-health").findings
    assert finding.severity is Severity.CRITICAL and expected in finding.summary
    assert finding.resource == "node/ip-10-0-1-23"


def test_missing_nvidia_smi_on_unknown_type_is_unverified_and_on_trainium_not_applicable():
    unknown = check(ReplayHost({}, instance_type=None), "node-gpu-health")
    assert unknown.findings == [] and unknown.errors[0].code == "NotInstalled"
    assert unknown.status is Status.WARNING
    trainium = check(ReplayHost({}, instance_type="trn1.32xlarge"), "node-gpu-health")
    assert trainium.skipped[0].reason == "trn1.32xlarge has no NVIDIA GPUs"


# --- gpu-xid -----------------------------------------------------------------------------------------------

def xid_findings(host):
    return {f.evidence["pci"]: f for f in check(host, "gpu-xid").findings}


def test_journalctl_xids_classified_by_action():
    host = ReplayHost({"journalctl": ok(fixture("journalctl-k-xid.log")),
                     "nvidia-smi": ok(fixture("nvidia-smi-p5-healthy.csv"))})
    found = xid_findings(host)
    assert {pci: f.evidence["action"] for pci, f in found.items()} == {
        "PCI:0000:64:00": "restart-app",  # Xid 31 (13 is from two days ago: faded)
        "PCI:0000:a8:00": "reset",  # 94 (restart) then 63 (row remap pending until reset): reset wins
        "PCI:0000:b9:00": "reset",  # 74 NVLink
        "PCI:0000:ca:00": "reboot",  # 79 fallen off the bus
    }
    assert found["PCI:0000:64:00"].severity is Severity.WARNING
    assert [x["xid"] for x in found["PCI:0000:64:00"].evidence["xids"]] == [31]
    bus = found["PCI:0000:ca:00"]
    assert bus.severity is Severity.CRITICAL and bus.evidence["xids"][0]["count"] == 2
    assert bus.evidence["gpu_index"] == 7 and bus.evidence["source"] == "journalctl -k -b"
    assert "Xid 79 (GPU has fallen off the bus) 2x" in bus.summary and "reboot the node" in bus.summary
    assert [x["xid"] for x in found["PCI:0000:a8:00"].evidence["xids"]] == [63, 94]
    assert found["PCI:0000:a8:00"].evidence["xids"][1]["process"] == "python3"


def test_dmesg_is_used_when_journalctl_is_not_allowed():
    host = ReplayHost({
        "journalctl": (0, "", "Hint: You are currently not seeing messages from other users and the system."),
        "dmesg": ok(fixture("dmesg-iso-xid.log")),
    })
    found = xid_findings(host)
    assert {pci: f.evidence["action"] for pci, f in found.items()} == {"PCI:0000:53:00": "reset",
                                                                       "PCI:0000:86:00": "reset"}
    assert [x["xid"] for x in found["PCI:0000:53:00"].evidence["xids"]] == [48, 45]
    assert found["PCI:0000:86:00"].evidence["xids"][0]["meaning"] == "GPU recovery action changed"
    assert found["PCI:0000:53:00"].evidence["source"] == "dmesg"


def test_kern_log_drops_lines_from_before_this_boot():
    uptime = f"{(NOW - datetime(2025, 3, 4, 0, 41, 7, tzinfo=UTC)).total_seconds():.2f} 912345.10\n"
    host = ReplayHost({"dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")},
                    files={"/var/log/kern.log": fixture("kern.log"), "/proc/uptime": uptime})
    found = xid_findings(host)
    # The Xid 79 on Mar 1 happened before the last reboot: the reboot was its fix.
    assert list(found) == ["PCI:0000:75:00"]
    assert [x["xid"] for x in found["PCI:0000:75:00"].evidence["xids"]] == [43, 92]
    assert found["PCI:0000:75:00"].severity is Severity.WARNING


def test_clean_kernel_log_passes_and_unreadable_log_is_not_verified():
    assert check(ReplayHost({"journalctl": ok("-- No entries --\n")}), "gpu-xid").findings == []
    denied = check(ReplayHost({"dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")}),
                   "gpu-xid")
    [error] = denied.errors
    assert error.code == "KernelLogUnreadable" and "journalctl -k -b: not installed" in error.message
    assert "Operation not permitted" in error.message and denied.status is Status.WARNING


# --- node-efa-provider -------------------------------------------------------------------------------------

def test_efa_provider_devices_against_the_instance_type():
    p4d = check(ReplayHost({"fi_info": ok(fixture("fi_info-efa-p4d.txt"))}, instance_type="p4d.24xlarge"),
                "node-efa-provider")
    assert p4d.findings == [] and p4d.status is Status.OK
    # The same four devices on a p5.48xlarge are 4 of its 32.
    [thin] = check(ReplayHost({"fi_info": ok(fixture("fi_info-efa-p4d.txt"))}), "node-efa-provider").findings
    assert thin.severity is Severity.WARNING
    assert (thin.evidence["devices"], thin.evidence["expected_devices"]) == (4, 32)
    assert thin.evidence["device_names"] == ["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"]


def test_no_efa_provider_is_critical():
    host = ReplayHost({"fi_info": (1, "", fixture("fi_info-no-efa.txt"))})
    [finding] = check(host, "node-efa-provider").findings
    assert finding.severity is Severity.CRITICAL and "fi_getinfo: -61 (No data available)" in finding.summary


def test_fi_info_found_in_the_efa_installer_path_or_reported_missing():
    host = ReplayHost({"/opt/amazon/efa/bin/fi_info": ok(fixture("fi_info-efa-p4d.txt"))}, instance_type="p4d.24xlarge")
    assert check(host, "node-efa-provider").findings == []
    [missing] = check(ReplayHost({}), "node-efa-provider").findings
    assert "fi_info is not installed" in missing.summary and missing.severity is Severity.CRITICAL
    assert check(ReplayHost({}, instance_type="inf2.48xlarge"), "node-efa-provider").skipped[0].reason == (
        "inf2.48xlarge does not support EFA")
