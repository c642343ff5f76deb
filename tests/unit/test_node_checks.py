"""On-node checks over a host replaying recorded nvidia-smi, kernel-log, sysfs and fi_info output."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.model import Severity, Status
from fmdoctor.node import fi_info, gpu_memory, nvidia_smi
from fmdoctor.node.replay import ReplayHost, files_from_head

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "node"
NOW = datetime(2025, 3, 4, 3, 0, tzinfo=UTC)
NODE_IDS = ["node-gpu-health", "gpu-xid", "node-efa-provider"]
MEMORY = " ".join(gpu_memory.COMMAND)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def ok(text: str):
    return (0, text, "")


def check(host: ReplayHost, *only: str):
    return Doctor(settings=Settings(), clock=lambda: NOW).check_local(only=list(only) or None, host=host)


def gpu_commands(csv: str = "nvidia-smi-p5-healthy.csv", memory: str = "nvidia-smi-q-memory-h100-healthy.txt"):
    return {"nvidia-smi": ok(fixture(csv)), MEMORY: ok(fixture(memory))}


def healthy_commands():
    return {**gpu_commands(), "journalctl": ok("-- No entries --\n"), "fi_info": ok(fixture("fi_info-efa-p4d.txt"))}


# --- all three, healthy ------------------------------------------------------------------------------------

def test_healthy_p4d_node_passes_every_node_check():
    host = ReplayHost({**healthy_commands(), "nvidia-smi": ok(fixture("nvidia-smi-a100-p4d.csv")),
                       MEMORY: ok(fixture("nvidia-smi-q-memory-h100-healthy.txt").replace("2560", "640"))},
                      instance_type="p4d.24xlarge")
    report = check(host)
    assert report.errors == [] and report.status is Status.OK
    assert [c for c in report.stats.checks_run if not c.startswith("spot-")] == NODE_IDS  # the IMDS Spot checks too
    assert report.stats.api_calls == {}
    # each nvidia-smi query ran once for both GPU checks, with the exact arguments the parsers expect
    assert host.ran.count(nvidia_smi.COMMAND) == 1 and host.ran.count(gpu_memory.COMMAND) <= 1


# --- node-gpu-health ---------------------------------------------------------------------------------------

def test_parse_healthy_csv():
    parsed = nvidia_smi.parse(fixture("nvidia-smi-p5-healthy.csv"))
    assert [g.index for g in parsed.gpus] == list(range(8)) and parsed.unreadable == []
    first = parsed.gpus[0]
    assert (first.utilization, first.memory_used, first.memory_total, first.ecc_uncorrected) == (100, 72315, 81559, 0)
    assert nvidia_smi.pci_key(first.pci_bus_id) == nvidia_smi.pci_key("PCI:0000:53:00") == "53:00"


def test_degraded_p5_missing_gpu_ecc_and_full_memory():
    host = ReplayHost(gpu_commands("nvidia-smi-p5-degraded.csv"))
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
    host = ReplayHost({"nvidia-smi": (15, fixture("nvidia-smi-lost-gpu.csv"), ""),
                       MEMORY: (15, "", "Unable to determine the device handle for GPU0000:90:1C.0: Unknown Error")},
                      instance_type="p4d.24xlarge")
    report = check(host, "node-gpu-health")
    [finding] = report.findings
    assert finding.evidence["lost"] == [{"index": 2, "pci_bus_id": "00000000:20:1C.0", "state": "[GPU requires reset]"}]
    assert finding.evidence["unreadable"] == [
        "Unable to determine the device handle for GPU0000:90:1C.0: Unknown Error"]
    assert "sees 6 working GPUs of its 8" in finding.summary
    assert [e.code for e in report.errors] == ["MemoryErrorsUnreadable"]  # said, not taken as healthy


@pytest.mark.parametrize(
    "answer, expected",
    [
        (None, "not installed"),
        ((9, fixture("nvidia-smi-driver-failure.txt"), ""), "couldn't communicate with the NVIDIA"),
        ((124, "", "timed out after 15.0s"), "did not answer"),
    ],
    ids=["missing", "driver-failure", "hang"],
)
def test_nvidia_smi_missing_failing_or_hanging_is_critical(answer, expected):
    host = ReplayHost({"nvidia-smi": answer} if answer else {}, instance_type="p5.48xlarge")
    [finding] = check(host, "node-gpu-health").findings
    assert finding.severity is Severity.CRITICAL and expected in finding.summary
    assert finding.resource == "node/ip-10-0-1-23"


def test_missing_nvidia_smi_on_unknown_type_is_unverified_unless_the_pci_bus_answers():
    unknown = check(ReplayHost({}, instance_type=None), "node-gpu-health")
    assert unknown.findings == [] and unknown.errors[0].code == "NotInstalled"
    assert unknown.status is Status.WARNING
    g7e = files_from_head(fixture("pci-uevents-g7e.txt"))
    [driverless] = check(ReplayHost({}, files=g7e, instance_type="g7e.48xlarge"), "node-gpu-health").findings
    assert "8 GPUs by its PCI bus" in driverless.summary and driverless.evidence["expected_from"] == "PCI bus"


def test_remapping_failure_is_critical_replace_and_pending_is_a_warning_reset():
    host = ReplayHost(gpu_commands(memory="nvidia-smi-q-memory-h100-faults.txt"))
    findings = {f.evidence["gpu_index"]: f for f in check(host, "node-gpu-health").findings}
    assert set(findings) == {5, 6}
    pending, failed = findings[5], findings[6]
    assert (pending.severity, pending.evidence["action"]) == (Severity.WARNING, "reset")
    assert pending.evidence["remapped_rows"] == {"correctable": 0, "uncorrectable": 1, "pending": True,
                                                 "failure": False}
    assert (failed.severity, failed.evidence["action"]) == (Severity.CRITICAL, "replace")
    assert "failed row remap" in failed.summary


def test_retired_pages_pending_on_a_v100_asks_for_a_driver_reload():
    host = ReplayHost(gpu_commands("nvidia-smi-v100-p3dn.csv", "nvidia-smi-q-memory-v100-retired.txt"),
                      instance_type="p3dn.24xlarge")
    report = check(host, "node-gpu-health")
    [finding] = report.findings
    assert finding.severity is Severity.WARNING and finding.evidence["action"] == "reboot"
    assert finding.evidence["retired_pages"] == {"single_bit_ecc": 2, "double_bit_ecc": 0, "pending": True}
    assert finding.evidence["remapped_rows"] is None and report.errors == []


def test_memory_state_that_nvidia_smi_reports_as_na_is_not_verified():
    both_na = fixture("nvidia-smi-q-memory-v100-retired.txt").replace(": 0\n", ": N/A\n").replace(": No\n", ": N/A\n")
    both_na = both_na.replace(": 2\n", ": N/A\n").replace(": Yes\n", ": N/A\n")
    host = ReplayHost(gpu_commands("nvidia-smi-v100-p3dn.csv") | {MEMORY: ok(both_na)}, instance_type="p3dn.24xlarge")
    report = check(host, "node-gpu-health")
    assert report.findings == [] and [e.code for e in report.errors] == ["MemoryErrorsNotReported"]


def test_trainium_devices_are_counted_with_neuron_ls_or_dev_nodes():
    trn1 = fixture("neuron-ls-trn1.json")
    assert check(ReplayHost({"neuron-ls": ok(trn1)}, instance_type="trn1.32xlarge"), "node-gpu-health").findings == []
    short = json.dumps(json.loads(trn1)[:-1], indent=4)  # device 15 gone
    [finding] = check(ReplayHost({"neuron-ls": ok(short)}, instance_type="trn1.32xlarge"), "node-gpu-health").findings
    assert finding.severity is Severity.CRITICAL and "sees 15 of the 16 Neuron devices" in finding.summary
    dev = ReplayHost({}, instance_type="trn1.32xlarge", dirs={"/dev": ["null", *(f"neuron{i}" for i in range(16))]})
    assert check(dev, "node-gpu-health").findings == []
    blind = check(ReplayHost({}, instance_type="trn1.32xlarge"), "node-gpu-health")
    assert blind.findings == [] and blind.errors[0].code == "NotInstalled"


# --- gpu-xid -----------------------------------------------------------------------------------------------

def xid_findings(host):
    return {f.evidence["pci"]: f for f in check(host, "gpu-xid").findings}


def test_journalctl_xids_judged_by_the_catalogue():
    host = ReplayHost({"journalctl": ok(fixture("journalctl-k-xid.log")), **gpu_commands()})
    found = xid_findings(host)
    assert {pci: (f.evidence["resolution"], f.severity) for pci, f in found.items()} == {
        "PCI:0000:64:00": ("RESTART_APP", Severity.WARNING),  # Xid 31 (13 is from two days ago: faded)
        "PCI:0000:a8:00": ("RESTART_APP", Severity.WARNING),  # 94, with 63 (IGNORE in the catalogue) beside it
        "PCI:0000:b9:00": ("WORKFLOW_NVLINK_ERR", Severity.CRITICAL),  # 74 NVLink: reset
        "PCI:0000:ca:00": ("RESTART_BM", Severity.CRITICAL),  # 79 fallen off the bus
    }
    assert [x["xid"] for x in found["PCI:0000:64:00"].evidence["xids"]] == [31]
    bus = found["PCI:0000:ca:00"]
    assert bus.evidence["action"] == "reboot" and bus.evidence["xids"][0]["count"] == 2
    assert bus.evidence["gpu_index"] == 7 and bus.evidence["source"] == "journalctl -k -b"
    assert "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: GPU has fallen off the bus) 2x" in bus.summary
    assert "RESTART_BM" in bus.summary
    remap = found["PCI:0000:a8:00"].evidence["xids"]
    assert [(x["xid"], x["resolution"]) for x in remap] == [(94, "RESTART_APP"), (63, "IGNORE")]
    assert remap[0]["process"] == "python3"


def test_dmesg_is_used_when_journalctl_is_not_allowed():
    host = ReplayHost({
        "journalctl": (0, "", "Hint: You are currently not seeing messages from other users and the system."),
        "dmesg": ok(fixture("dmesg-iso-xid.log")),
    })
    found = xid_findings(host)
    assert {pci: f.evidence["action"] for pci, f in found.items()} == {"PCI:0000:53:00": "reset",
                                                                       "PCI:0000:86:00": "reset"}
    assert [x["xid"] for x in found["PCI:0000:53:00"].evidence["xids"]] == [48, 45]
    recovery = found["PCI:0000:86:00"].evidence["xids"][0]
    assert (recovery["xid"], recovery["resolution"]) == (154, "RESET_GPU")  # "to 0x1 (GPU Reset Required)"
    assert found["PCI:0000:53:00"].evidence["source"] == "dmesg"


def test_kern_log_drops_lines_from_before_this_boot():
    uptime = f"{(NOW - datetime(2025, 3, 4, 0, 41, 7, tzinfo=UTC)).total_seconds():.2f} 912345.10\n"
    host = ReplayHost({"dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted")},
                      files={"/var/log/kern.log": fixture("kern.log"), "/proc/uptime": uptime})
    found = xid_findings(host)
    # The Xid 79 on Mar 1 happened before the last reboot: the reboot was its fix.
    assert list(found) == ["PCI:0000:75:00"]
    assert [x["xid"] for x in found["PCI:0000:75:00"].evidence["xids"]] == [43, 92]  # both IGNORE
    assert found["PCI:0000:75:00"].severity is Severity.INFO


def test_critical_xids_stand_for_the_boot_and_application_ones_fade():
    log = ("2025-03-01T01:00:00+0000 h kernel: NVRM: Xid (PCI:0000:53:00): 46, pid=1, name=python3, Ch 00000010\n"
           "2025-03-01T01:00:00+0000 h kernel: NVRM: Xid (PCI:0000:64:00): 13, pid=1, name=python3, Graphics SM\n")
    found = xid_findings(ReplayHost({"journalctl": ok(log)}))
    assert list(found) == ["PCI:0000:53:00"] and found["PCI:0000:53:00"].severity is Severity.CRITICAL


def test_xid_45_alone_means_restart_fabric_manager():
    log = "2025-03-04T02:00:00+0000 h kernel: NVRM: Xid (PCI:0000:53:00): 45, pid=51877, name=python3, Ch 00000010\n"
    [finding] = check(ReplayHost({"journalctl": ok(log)}), "gpu-xid").findings
    assert finding.severity is Severity.WARNING and finding.evidence["action"] == "restart-fabric-manager"


def test_fatal_sxids_are_critical_and_non_fatal_ones_info():
    log = ("2025-03-04T02:10:00+0000 h kernel: nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 28 "
           "sourcetrack timeout error (First)\n"
           "2025-03-04T02:10:01+0000 h kernel: nvidia-nvswitch1: SXid (PCI:0000:c4:00.0): 20001, Non-fatal, Link 04 "
           "TX Replay Error\n")
    found = {f.evidence["pci"]: f for f in check(ReplayHost({"journalctl": ok(log)}), "gpu-xid").findings}
    assert found["PCI:0000:c3:00.0"].severity is Severity.CRITICAL
    assert found["PCI:0000:c3:00.0"].evidence["action"] == "reset-fabric"
    assert found["PCI:0000:c4:00.0"].severity is Severity.INFO


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


# fi_info -p efa as libfabric's EFA provider printed it over the years (sources in tests/fixtures/node/README.md):
# provider versions 2.0 and 3.0 with the utility providers ofi_rxd/ofi_rxr stacked on it, libfabric 1.12's
# "EFA-fe80::..." fabric and efa_0 domain, 1.22/2.0's "efa" fabric, and 2.1's second fabric "efa-direct" listing
# every device's RDM endpoint a second time.
@pytest.mark.parametrize("name, devices, versions", [
    ("fi_info-efa-prov2.0-c5n.txt", ["efa_0"], ["2.0"]),
    ("fi_info-efa-prov3.0-p3dn.txt", ["efa_0"], ["3.0"]),
    ("fi_info-efa-libfabric1.12-hpc6a.txt", ["efa_0"], ["112.0"]),
    ("fi_info-efa-p4d.txt", ["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"], ["122.0"]),
    ("fi_info-efa-p5en.txt", None, ["200.0"]),
    ("fi_info-efa-libfabric2.1-p5en.txt", None, ["201.0"]),
])
def test_fi_info_from_every_libfabric_generation_counts_each_device_once(name, devices, versions):
    provider = fi_info.parse(fixture(name))
    if devices is None:  # the p5en's 16 devices, whichever libfabric printed them
        devices = fi_info.parse(fixture("fi_info-efa-p5en.txt")).devices
        assert len(devices) == 16
    assert provider.devices == devices and provider.versions == versions and provider.rdm
    assert provider.endpoint_types == ["FI_EP_RDM", "FI_EP_DGRAM"]


@pytest.mark.parametrize("instance_type, name", [
    ("c5n.18xlarge", "fi_info-efa-prov2.0-c5n.txt"),
    ("p3dn.24xlarge", "fi_info-efa-prov3.0-p3dn.txt"),
    ("hpc6a.48xlarge", "fi_info-efa-libfabric1.12-hpc6a.txt"),
    ("p5en.48xlarge", "fi_info-efa-libfabric2.1-p5en.txt"),
])
def test_a_healthy_node_passes_whichever_libfabric_it_runs(instance_type, name):
    # Kernels of that era named the device efa_0 in /sys/class/infiniband; c5n is not in fmdoctor's type table,
    # so the node's own listing is what the provider is compared with.
    efa_0 = {"/sys/class/infiniband/efa_0/device/uevent": (
        "DRIVER=efa\nPCI_CLASS=20000\nPCI_ID=1D0F:EFA0\nPCI_SUBSYS_ID=1D0F:EFA0\nPCI_SLOT_NAME=0000:00:06.0\n"
        "MODALIAS=pci:v00001D0Fd0000EFA0sv00001D0Fsd0000EFA0bc02sc00i00\n")}
    host = ReplayHost({"fi_info": ok(fixture(name))}, files=efa_0 if "efa_0" in fixture(name) else None,
                      instance_type=instance_type)
    report = check(host, "node-efa-provider")
    assert report.findings == [] and report.errors == [] and report.status is Status.OK


def test_efa_direct_entries_do_not_hide_a_missing_device():
    """libfabric 2.1 lists each device under both fabrics: a p5en.48xlarge that lost two devices sees 14, not 28."""
    lines = fixture("fi_info-efa-libfabric2.1-p5en.txt").splitlines(keepends=True)
    blocks = ["".join(lines[i:i + 6]) for i in range(0, len(lines), 6)]
    kept = "".join(b for b in blocks if "rdmap200s0-" not in b and "rdmap201s0-" not in b)
    [thin] = check(ReplayHost({"fi_info": ok(kept)}, instance_type="p5en.48xlarge"), "node-efa-provider").findings
    assert thin.severity is Severity.WARNING
    assert (thin.evidence["devices"], thin.evidence["expected_devices"]) == (14, 16)


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


SYS_NO_RDMA = {"/sys/class": ["block", "net", "pci_bus"]}  # /sys readable, no infiniband class: no RDMA device


@pytest.mark.parametrize("instance_type, reason", [
    ("c5.2xlarge", "c5.2xlarge is not among the instance types AWS lists as supporting EFA"),
    ("g5.2xlarge", "g5.2xlarge does not support EFA"),
    ("m7i.large", "m7i.large is not among the instance types AWS lists as supporting EFA"),
    ("m7i.48xlarge", "it has no NVIDIA GPU: a CPU node need not use EFA"),
    ("g6e.12xlarge", "EFA is optional on a g6e.12xlarge"),
])
def test_a_node_that_cannot_or_need_not_have_efa_is_never_told_it_lacks_it(instance_type, reason):
    pci = files_from_head(fixture("pci-uevents-c6i.txt"))
    host = ReplayHost({"fi_info": (1, "", "fi_getinfo: -61 (No data available)")}, files=pci,
                      instance_type=instance_type, dirs=SYS_NO_RDMA)
    report = check(host, "node-efa-provider")
    assert report.findings == [] and report.errors == [] and reason in report.skipped[0].reason


def test_a_type_that_cannot_have_efa_is_not_applicable_even_when_sys_cannot_be_read():
    report = check(ReplayHost({}, instance_type="c5.2xlarge"), "node-efa-provider")
    assert report.findings == [] and report.skipped and report.errors == []


def test_unknown_type_compares_the_provider_with_the_efa_devices_the_node_lists():
    files = files_from_head(fixture("pci-uevents-g7e.txt"))
    provider = fixture("fi_info-efa-trn1.txt")
    report = check(ReplayHost({"fi_info": ok(provider)}, files=files, instance_type="g7e.48xlarge"),
                   "node-efa-provider")
    assert report.errors == [] and report.findings == []  # 8 provider devices >= the 4 attached
    one = "\n".join(provider.splitlines()[:6]) + "\n"
    [short] = check(ReplayHost({"fi_info": ok(one)}, files=files, instance_type="g7e.48xlarge"),
                    "node-efa-provider").findings
    assert (short.evidence["devices"], short.evidence["expected_devices"]) == (1, 4)
    assert short.evidence["expected_from"] == "/sys/class/infiniband"


def test_unknown_gpu_type_without_efa_is_not_verified_rather_than_failed():
    pci = {p: t for p, t in files_from_head(fixture("pci-uevents-g7e.txt")).items() if "infiniband" not in p}
    report = check(ReplayHost({"fi_info": (1, "", "fi_getinfo: -61 (No data available)")}, files=pci,
                              instance_type="g7e.48xlarge", dirs=SYS_NO_RDMA), "node-efa-provider")
    assert report.findings == [] and [e.code for e in report.errors] == ["UnknownInstanceType"]


def test_a_type_whose_efa_count_aws_does_not_document_is_checked_against_the_node_and_said():
    files = files_from_head(fixture("pci-uevents-g7e.txt"))
    report = check(ReplayHost({"fi_info": ok(fixture("fi_info-efa-trn1.txt"))}, files=files,
                              instance_type="p6e-gb200.36xlarge"), "node-efa-provider")
    assert report.findings == [] and [e.code for e in report.errors] == ["EfaCountUndocumented"]
