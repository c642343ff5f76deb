"""NVIDIA Xid errors from the kernel log, classified by NVIDIA's Xid catalogue into the action they need.

The driver logs ``NVRM: Xid (PCI:0000:53:00): 79, pid=..., name=..., GPU has fallen off the bus.``; the
number says what broke and, per NVIDIA's Xid documentation and its GPU debug guidelines, what to do: restart
the application (13, 31, 43, 94...), reset the GPU (48, 63, 74, 95, 119...), reboot the node (79) or take
the GPU out of service (64). Xid 154 (newer drivers) states the recovery action itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

ISOLATE, REBOOT, RESET, RESTART_APP, MONITOR = "isolate", "reboot", "reset", "restart-app", "monitor"
ACTION_RANK = {MONITOR: 0, RESTART_APP: 1, RESET: 2, REBOOT: 3, ISOLATE: 4}
ACTION_TEXT = {
    ISOLATE: "take the GPU out of service (drain the node and replace the GPU)",
    REBOOT: "reboot the node (replace it if this recurs)",
    RESET: "drain the node and reset the GPU (nvidia-smi -r) or reboot; replace it if this recurs",
    RESTART_APP: "restart the application (usually a bug or bad input in it, not the GPU)",
    MONITOR: "no action unless it repeats",
}


@dataclass(frozen=True)
class XidInfo:
    meaning: str
    action: str


CATALOGUE: dict[int, XidInfo] = {
    13: XidInfo("Graphics engine exception (illegal address or instruction in a kernel)", RESTART_APP),
    31: XidInfo("GPU memory page fault (the application touched memory it does not own)", RESTART_APP),
    43: XidInfo("GPU stopped processing (the application hit an error and was stopped)", RESTART_APP),
    45: XidInfo("Preemptive cleanup after an earlier error", MONITOR),
    48: XidInfo("Double-bit (uncorrectable) ECC error in GPU memory", RESET),
    61: XidInfo("Internal micro-controller breakpoint/warning", RESET),
    62: XidInfo("Internal micro-controller halt", RESET),
    63: XidInfo("ECC page retirement or row remapping recorded (pending until the GPU is reset)", RESET),
    64: XidInfo("ECC page retirement or row remapping failed (no spare rows left)", ISOLATE),
    68: XidInfo("Video decoder (NVDEC) exception", RESTART_APP),
    69: XidInfo("Graphics engine class error", RESTART_APP),
    74: XidInfo("NVLink error", RESET),
    79: XidInfo("GPU has fallen off the bus", REBOOT),
    92: XidInfo("High single-bit ECC error rate", MONITOR),
    94: XidInfo("Contained ECC error (only the affected application was stopped)", RESTART_APP),
    95: XidInfo("Uncontained ECC error (every application on the GPU is affected)", RESET),
    109: XidInfo("Context switch timeout", RESTART_APP),
    119: XidInfo("GSP RPC timeout (GPU System Processor not responding)", RESET),
    120: XidInfo("GSP error", RESET),
    140: XidInfo("Unrecovered ECC error", RESET),
    154: XidInfo("GPU recovery action changed", MONITOR),  # the action is in the message itself
}
_RECOVERY = [("node reboot required", REBOOT), ("gpu reset required", RESET), ("drain and reset", RESET),
             ("drain p2p", RESET)]

_XID = re.compile(r"NVRM: Xid \((?P<pci>PCI:[0-9A-Fa-f:.]+)\): (?P<xid>\d+),\s*(?P<rest>.*)$")
_PROCESS = re.compile(r"pid=(?P<pid>'?<?[\w-]+>?'?), name=(?P<name>[^,]*),\s*")
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[.,]\d+)?([+-]\d{2}:?\d{2}|Z)?")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2}) ")


@dataclass(frozen=True)
class XidEvent:
    pci: str
    xid: int
    message: str
    process: str | None
    time: datetime | None
    line: str

    @property
    def info(self) -> XidInfo:
        return CATALOGUE.get(self.xid) or XidInfo("Not in fmdoctor's catalogue; see NVIDIA's Xid documentation",
                                                  MONITOR)

    @property
    def action(self) -> str:
        if self.xid == 154:
            lowered = self.message.lower()
            return next((action for text, action in _RECOVERY if text in lowered), MONITOR)
        return self.info.action


def parse_time(line: str, now: datetime) -> datetime | None:
    """Timestamps of journalctl -o short-iso, dmesg --time-format iso, or syslog (which has no year)."""
    match = _ISO.match(line)
    if match:
        zone = (match.group(2) or "+00:00").replace("Z", "+00:00")
        if ":" not in zone:
            zone = zone[:3] + ":" + zone[3:]
        return datetime.fromisoformat(match.group(1) + zone).astimezone(UTC)
    match = _SYSLOG.match(line)
    if match:
        stamp = datetime.strptime(f"{now.year} {match.group(1)}", "%Y %b %d %H:%M:%S").replace(tzinfo=UTC)
        return stamp.replace(year=now.year - 1) if stamp > now else stamp
    return None


def parse_kernel_log(text: str, now: datetime) -> list[XidEvent]:
    events = []
    for raw in text.splitlines():
        match = _XID.search(raw)
        if not match:
            continue
        rest = match.group("rest").strip()
        process = _PROCESS.match(rest)
        message = rest[process.end():] if process else rest
        name = process.group("name").strip() if process else None
        events.append(XidEvent(
            pci=match.group("pci"), xid=int(match.group("xid")), message=message.strip(),
            process=None if name in {None, "<unknown>"} else name, time=parse_time(raw.strip(), now),
            line=raw.strip(),
        ))
    return events
