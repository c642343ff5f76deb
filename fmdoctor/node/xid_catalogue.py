"""The verdict for an NVIDIA Xid code, from NVIDIA's Xid catalogue kept as data (``data/xid_catalogue.csv``).

The catalogue's "Resolution Bucket (Immediate Action)" column decides: RESET_GPU, RESTART_BM, RESTART_VM,
CONTACT_SUPPORT and the hardware/software checks (CHECK_MECHANICALS, UPDATE_SWFW, CHECK_UVM) are critical with
that action; RESTART_APP is a warning; IGNORE is info. The workflow rows follow the text of their row: 48 (double
bit ECC) and 74 (NVLink) "a GPU reset or node reboot is needed to clear this error", 144-150 (NVLink5) are the
fatal NVLink errors of B200/GB200, 45 follows the Xid it accompanies (alone: restart Fabric Manager) and 154 names
the recovery action in its own message. A code the catalogue leaves blank or does not list is a warning that says
so, never silence. Source: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

from fmdoctor.engine.model import Severity

CATALOGUE_FILE = "xid_catalogue.csv"
CATALOGUE_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class Resolution:
    severity: Severity
    action: str  # fmdoctor's short name for it, in findings' evidence and runbooks
    text: str  # what to do, in one phrase


_RESET = "drain the node, stop every process on the GPU and reset it (nvidia-smi -r) or reboot; replace it if it recurs"
RESOLUTIONS: dict[str, Resolution] = {
    "RESET_GPU": Resolution(Severity.CRITICAL, "reset", _RESET),
    "WORKFLOW_XID_48": Resolution(Severity.CRITICAL, "reset", _RESET),
    "WORKFLOW_NVLINK_ERR": Resolution(Severity.CRITICAL, "reset", _RESET + " (check the GPU at the link's other end)"),
    "WORKFLOW_NVLINK5_ERR": Resolution(Severity.CRITICAL, "reset", _RESET + " (fatal NVLink5 error)"),
    "RESTART_BM": Resolution(Severity.CRITICAL, "reboot",
                             "drain and reboot the node (stop and start the instance if the GPU does not come back)"),
    "RESTART_VM": Resolution(Severity.CRITICAL, "restart-vm", "drain the node and restart the instance"),
    "CONTACT_SUPPORT": Resolution(Severity.CRITICAL, "contact-support",
                                  "take the node out of service and report the GPU to AWS support "
                                  "(replace the instance)"),
    "CHECK_MECHANICALS": Resolution(Severity.CRITICAL, "check-hardware",
                                    "take the node out of service: the GPU's board or power needs a hardware check "
                                    "(replace the instance and report it to AWS)"),
    "UPDATE_SWFW": Resolution(Severity.CRITICAL, "update-driver", "update the GPU driver and firmware, then reboot"),
    "CHECK_UVM": Resolution(Severity.CRITICAL, "check-uvm",
                            "if the job used unified memory (UVM), drain the node and reset the GPU"),
    "RESTART_FM": Resolution(Severity.WARNING, "restart-fabric-manager",
                             "restart NVIDIA Fabric Manager (Xid 45 with no other Xid)"),
    "RESTART_APP": Resolution(Severity.WARNING, "restart-app",
                              "restart the application (a bug or bad input in it, not the GPU)"),
    "WORKFLOW_XID_45": Resolution(Severity.INFO, "follow-other-xid",
                                  "follow the Xid it accompanies (the driver cleaned up after another error)"),
    "XID_154": Resolution(Severity.INFO, "follow-other-xid", "follow the recovery action the message names"),
    "IGNORE": Resolution(Severity.INFO, "monitor", "no action unless it repeats"),
    "": Resolution(Severity.WARNING, "read-catalogue",
                   "NVIDIA's catalogue gives no immediate action for it: read the row's trigger conditions"),
    "UNKNOWN": Resolution(Severity.WARNING, "read-catalogue",
                          "not in NVIDIA's catalogue as fmdoctor keeps it: look it up in the current catalogue"),
}
# Xid 154's message: "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)".
RECOVERY_ACTIONS = {"node reboot required": "RESTART_BM", "gpu reset required": "RESET_GPU",
                    "drain and reset": "RESET_GPU", "drain p2p": "RESET_GPU", "none": "IGNORE"}
ACTION_ORDER = ("monitor", "follow-other-xid", "read-catalogue", "restart-app", "restart-fabric-manager", "check-uvm",
                "update-driver", "reset", "check-hardware", "contact-support", "restart-vm", "reboot")


@dataclass(frozen=True)
class CatalogueEntry:
    code: int
    mnemonic: str
    description: str
    applies_to: tuple[str, ...]  # of A100, H100, B100, GB200
    resolution: str  # the "Immediate Action" column as NVIDIA writes it; "" where it is blank


@dataclass(frozen=True)
class XidVerdict:
    code: int
    mnemonic: str
    description: str
    applies_to: tuple[str, ...]
    resolution: str  # the catalogue's immediate action (or, for 154, the one its message names); "UNKNOWN" if unlisted
    severity: Severity
    action: str
    action_text: str

    @property
    def in_catalogue(self) -> bool:
        return self.resolution != "UNKNOWN"

    @property
    def rank(self) -> tuple[int, int]:
        return self.severity.rank, ACTION_ORDER.index(self.action)


@functools.cache
def catalogue() -> dict[int, CatalogueEntry]:
    text = resources.files("fmdoctor.node").joinpath("data", CATALOGUE_FILE).read_text(encoding="utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {int(row["code"]): CatalogueEntry(int(row["code"]), row["mnemonic"], row["description"],
                                             tuple(a for a in row["applies_to"].split(";") if a),
                                             row["immediate_resolution"]) for row in rows}


def recovery_action(message: str) -> str | None:
    """The resolution Xid 154's message names ('... to 0x1 (GPU Reset Required)'), None if it names none."""
    target = message.lower().rpartition(" to ")[2]
    return next((resolution for text, resolution in RECOVERY_ACTIONS.items() if text in target), None)


def xid_verdict(code: int, message: str = "") -> XidVerdict:
    """NVIDIA's verdict for Xid ``code``: severity, the catalogue's immediate action and what to do.

    ``message`` (the text after the code in the kernel log) matters only for Xid 154, whose message names the
    recovery action; every other code is judged by its catalogue row alone.
    """
    entry = catalogue().get(code)
    if entry is None:
        return _verdict(code, "", "", (), "UNKNOWN")
    resolution = entry.resolution
    if code == 154 and message:
        resolution = recovery_action(message) or resolution
    return _verdict(code, entry.mnemonic, entry.description, entry.applies_to, resolution)


def _verdict(code: int, mnemonic: str, description: str, applies_to: tuple[str, ...], resolution: str) -> XidVerdict:
    judged = RESOLUTIONS[resolution]
    return XidVerdict(code, mnemonic, description, applies_to, resolution, judged.severity, judged.action, judged.text)


def solo_xid_45() -> XidVerdict:
    """Xid 45 with no other Xid on the GPU: the catalogue's investigatory column says restart Fabric Manager."""
    entry = catalogue()[45]
    return _verdict(45, entry.mnemonic, entry.description, entry.applies_to, "RESTART_FM")
