"""NVIDIA Xid (GPU) and SXid (NVSwitch) errors in a kernel log, in every shape the driver and the log tools write.

The driver writes ``NVRM: Xid (PCI:0000:53:00): 79, pid=..., name=..., GPU has fallen off the bus.``; older
drivers leave out ``PCI:`` (``NVRM: Xid (0000:03:00): 14, Channel 00000001``), some lines end at the code, and
an Xid 79 can come only as ``NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.``. NVSwitches write
``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)``.
Lines carry the timestamp of whatever printed them: journalctl (short-iso, short, short-precise), dmesg
(``--time-format iso``, ``--decode``, ``-T``, raw seconds since boot, ``<3>`` kmsg priorities) or syslog files.
Each Xid is judged by NVIDIA's catalogue (:mod:`fmdoctor.node.xid_catalogue`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fmdoctor.node.xid_catalogue import XidVerdict, xid_verdict

_BDF = r"(?:PCI:)?(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
_XID = re.compile(rf"NVRM: Xid \((?P<pci>{_BDF})\): (?P<code>\d+)(?![\d.])(?:[,\s]\s*(?P<rest>.*?))?\s*$")
_FALLEN = re.compile(rf"NVRM: GPU (?P<pci>{_BDF}): GPU has fallen off the bus")
_FALLEN_START = re.compile(rf"NVRM: The NVIDIA GPU (?P<pci>{_BDF})\s*$")  # then "...fallen off the bus" lines later
_SXID = re.compile(rf"(?P<switch>nvidia-nvswitch\d+): SXid \((?P<pci>{_BDF})\): (?P<code>\d+)(?!\d)"
                   r"(?:,\s*(?P<rest>.*?))?\s*$")
_PROCESS = re.compile(r"pid=(?P<pid>'?<?[\w-]+>?'?), name=(?P<name>[^,]*),\s*")
_PREFIX = re.compile(r"^(?:<\d+>)?(?:\w+\s*:\s*\w+\s*:\s*)?")  # kmsg "<3>", dmesg --decode "kern  :warn  : "
_ISO = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[.,]\d+)?([+-]\d{2}:?\d{2}|Z)?")
_SYSLOG = re.compile(r"([A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2})(?:\.\d+)? ")
_CTIME = re.compile(r"\[([A-Z][a-z]{2} [A-Z][a-z]{2}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
_MONOTONIC = re.compile(r"\[\s*(\d+(?:\.\d+)?)\]")
# Fabric Manager user guide, "Always Fatal NVSwitch SXid Errors": fatal to the whole fabric whatever the line says.
ALWAYS_FATAL_SXIDS = frozenset({12020, 22003, 22011, *range(23001, 23018)})


@dataclass(frozen=True)
class XidEvent:
    pci: str  # normalised "PCI:0000:53:00", whatever the line wrote
    xid: int
    message: str
    process: str | None
    time: datetime | None
    line: str
    inferred: bool = False  # an Xid 79 read from "GPU has fallen off the bus" without an Xid line

    @property
    def verdict(self) -> XidVerdict:
        return xid_verdict(self.xid, self.message)


@dataclass(frozen=True)
class SxidEvent:
    switch: str  # "nvidia-nvswitch3"
    pci: str  # "PCI:0000:05:00.0"
    sxid: int
    fatal: bool | None  # None when the line states neither "Fatal" nor "Non-fatal" (a continuation line)
    message: str
    time: datetime | None
    line: str


def normalise_pci(bdf: str, function: bool = False) -> str:
    """'0000:03:00', 'PCI:0000:03:00.0' and '03:00' name the same GPU: 'PCI:0000:03:00' (with '.0' if asked)."""
    parts = bdf.removeprefix("PCI:").lower().split(":")
    domain = parts[0][-4:] if len(parts) == 3 else "0000"
    device = parts[-1] if function else parts[-1].split(".")[0]
    return f"PCI:{domain}:{parts[-2]}:{device}"


def parse_time(line: str, now: datetime, boot: datetime | None = None) -> datetime | None:
    """The line's timestamp in UTC; None when it has none (or only seconds since an unknown boot).

    Wall-clock stamps without a zone (syslog, dmesg -T) are read as UTC, the zone EC2 images run in; syslog's
    missing year is the one that puts the stamp in the past.
    """
    head = _PREFIX.sub("", line, count=1)
    if match := _ISO.match(head):
        zone = (match.group(2) or "+00:00").replace("Z", "+00:00")
        if ":" not in zone:
            zone = zone[:3] + ":" + zone[3:]
        return datetime.fromisoformat(match.group(1) + zone).astimezone(UTC)
    if match := _SYSLOG.match(head):
        stamp = datetime.strptime(f"{now.year} {match.group(1)}", "%Y %b %d %H:%M:%S").replace(tzinfo=UTC)
        return stamp.replace(year=now.year - 1) if stamp > now else stamp
    if match := _CTIME.match(head):
        return datetime.strptime(" ".join(match.group(1).split()), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)
    if boot is not None and (match := _MONOTONIC.match(head)):
        return boot + timedelta(seconds=float(match.group(1)))
    return None


def parse_kernel_log(text: str, now: datetime, boot: datetime | None = None) -> list[XidEvent]:
    """Every Xid in the log, in order; an Xid 79 only stated as 'fallen off the bus' counts once per GPU."""
    events: list[XidEvent] = []
    fallen: list[XidEvent] = []
    started: tuple[str, str, int] | None = None  # "The NVIDIA GPU <bdf>": (pci, its line, its number)
    for number, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if match := _XID.search(line):
            rest = (match.group("rest") or "").strip()
            process = _PROCESS.match(rest)
            name = process.group("name").strip() if process else None
            events.append(XidEvent(
                pci=normalise_pci(match.group("pci")), xid=int(match.group("code")),
                message=(rest[process.end():] if process else rest).strip(),
                process=None if name in {None, "<unknown>"} else name, time=parse_time(line, now, boot), line=line,
            ))
        elif match := _FALLEN.search(line):
            fallen.append(XidEvent(normalise_pci(match.group("pci")), 79, "GPU has fallen off the bus.", None,
                                   parse_time(line, now, boot), line, inferred=True))
        elif match := _FALLEN_START.search(line):
            started = (normalise_pci(match.group("pci")), line, number)
        elif started and number - started[2] <= 3 and "fallen off the bus" in line:
            fallen.append(XidEvent(started[0], 79, "GPU has fallen off the bus.", None,
                                   parse_time(started[1], now, boot), started[1], inferred=True))
            started = None
    logged_79 = {e.pci for e in events if e.xid == 79}
    for event in fallen:
        if event.pci not in logged_79:
            logged_79.add(event.pci)
            events.append(event)
    return events


def parse_sxid_log(text: str, now: datetime, boot: datetime | None = None) -> list[SxidEvent]:
    events = []
    for raw in text.splitlines():
        line = raw.strip()
        match = _SXID.search(line)
        if not match:
            continue
        rest = (match.group("rest") or "").strip()
        word = rest.split(",", 1)[0].strip().lower()
        fatal = {"fatal": True, "non-fatal": False, "nonfatal": False}.get(word)
        message = rest.split(",", 1)[1].strip() if fatal is not None and "," in rest else rest
        events.append(SxidEvent(match.group("switch"), normalise_pci(match.group("pci"), function=True),
                                int(match.group("code")),
                                fatal, message, parse_time(line, now, boot), line))
    return events
