"""Every Xid code in NVIDIA's catalogue maps to a verdict, and the verdict follows the catalogue's resolution."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from fmdoctor.engine.model import Severity
from fmdoctor.node.xid_catalogue import RESOLUTIONS, catalogue, recovery_action, solo_xid_45, xid_verdict

# The catalogue's "Resolution Bucket (Immediate Action)" and the severity each must give (issue 18): the buckets
# that take the node or GPU out of service are critical, an application restart a warning, IGNORE info.
CRITICAL = {"RESET_GPU", "RESTART_BM", "RESTART_VM", "CONTACT_SUPPORT", "CHECK_MECHANICALS", "UPDATE_SWFW",
            "CHECK_UVM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"}


def raw_rows():
    text = resources.files("fmdoctor.node").joinpath("data", "xid_catalogue.csv").read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("#")]
    return header, list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def test_the_data_file_names_its_source_and_version_and_covers_codes_1_to_172():
    header, rows = raw_rows()
    assert any("docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in line for line in header)
    assert any("Version:" in line for line in header)
    assert [int(r["code"]) for r in rows] == list(range(1, 173))
    assert all(r["mnemonic"] for r in rows)
    assert {a for r in rows for a in r["applies_to"].split(";") if a} == {"A100", "H100", "B100", "GB200"}


@pytest.mark.parametrize("code", range(1, 173))
def test_every_code_maps_to_the_verdict_its_resolution_column_says(code):
    entry = catalogue()[code]
    verdict = xid_verdict(code)
    assert verdict.code == code and verdict.in_catalogue and verdict.mnemonic == entry.mnemonic
    assert verdict.resolution == entry.resolution
    if entry.resolution in CRITICAL:
        assert verdict.severity is Severity.CRITICAL
    elif entry.resolution == "RESTART_APP":
        assert (verdict.severity, verdict.action) == (Severity.WARNING, "restart-app")
    elif entry.resolution == "IGNORE":
        assert (verdict.severity, verdict.action) == (Severity.INFO, "monitor")
    elif entry.resolution in {"WORKFLOW_XID_45", "XID_154"}:  # judged with the Xid they accompany or name
        assert verdict.severity is Severity.INFO and verdict.action == "follow-other-xid"
    else:  # blank in the catalogue (162-172): said, never silent
        assert entry.resolution == "" and verdict.severity is Severity.WARNING and verdict.action == "read-catalogue"
    assert verdict.action_text


@pytest.mark.parametrize("code, resolution, severity, action", [
    (46, "RESET_GPU", Severity.CRITICAL, "reset"),
    (109, "RESET_GPU", Severity.CRITICAL, "reset"),
    (110, "RESET_GPU", Severity.CRITICAL, "reset"),
    (136, "RESET_GPU", Severity.CRITICAL, "reset"),
    (143, "RESET_GPU", Severity.CRITICAL, "reset"),
    (155, "RESET_GPU", Severity.CRITICAL, "reset"),
    (156, "RESET_GPU", Severity.CRITICAL, "reset"),
    (158, "RESET_GPU", Severity.CRITICAL, "reset"),
    (79, "RESTART_BM", Severity.CRITICAL, "reboot"),
    (151, "RESTART_VM", Severity.CRITICAL, "restart-vm"),
    (54, "CHECK_MECHANICALS", Severity.CRITICAL, "check-hardware"),
    (48, "WORKFLOW_XID_48", Severity.CRITICAL, "reset"),
    (74, "WORKFLOW_NVLINK_ERR", Severity.CRITICAL, "reset"),
    (64, "RESET_GPU", Severity.CRITICAL, "reset"),
    (13, "RESTART_APP", Severity.WARNING, "restart-app"),
    (94, "RESTART_APP", Severity.WARNING, "restart-app"),
    (43, "IGNORE", Severity.INFO, "monitor"),
    (63, "IGNORE", Severity.INFO, "monitor"),
    (160, "IGNORE", Severity.INFO, "monitor"),  # NVSentinel's older copy said RESTART_BM; the catalogue wins
])
def test_the_codes_the_issue_names(code, resolution, severity, action):
    verdict = xid_verdict(code)
    assert (verdict.resolution, verdict.severity, verdict.action) == (resolution, severity, action)


@pytest.mark.parametrize("code", range(144, 151))
def test_nvlink5_xids_are_critical_on_blackwell(code):
    verdict = xid_verdict(code)
    assert verdict.severity is Severity.CRITICAL and verdict.applies_to == ("B100", "GB200")


@pytest.mark.parametrize("message, resolution, severity", [
    ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "RESET_GPU", Severity.CRITICAL),
    ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "RESTART_BM", Severity.CRITICAL),
    ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "RESET_GPU", Severity.CRITICAL),
    ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "IGNORE", Severity.INFO),
    ("", "XID_154", Severity.INFO),
])
def test_xid_154_takes_the_recovery_action_its_message_names(message, resolution, severity):
    verdict = xid_verdict(154, message)
    assert (verdict.resolution, verdict.severity) == (resolution, severity)


def test_recovery_action_reads_the_new_state_not_the_old_one():
    assert recovery_action("changed from 0x4 (Drain and Reset) to 0x1 (GPU Reset Required)") == "RESET_GPU"
    assert recovery_action("something else entirely") is None


def test_a_code_outside_the_catalogue_is_a_warning_that_says_so():
    verdict = xid_verdict(999)
    assert not verdict.in_catalogue and verdict.severity is Severity.WARNING and verdict.resolution == "UNKNOWN"
    assert "not in NVIDIA's catalogue" in verdict.action_text


def test_xid_45_alone_points_at_fabric_manager():
    assert xid_verdict(45).severity is Severity.INFO
    solo = solo_xid_45()
    assert (solo.resolution, solo.severity, solo.action) == ("RESTART_FM", Severity.WARNING, "restart-fabric-manager")


def test_every_resolution_fmdoctor_knows_is_one_the_catalogue_uses_or_a_documented_extra():
    used = {entry.resolution for entry in catalogue().values()}
    extras = {"RESTART_FM", "UNKNOWN"}  # Xid 45's investigatory bucket; a code not in the catalogue
    assert used <= set(RESOLUTIONS) and set(RESOLUTIONS) - used == extras
