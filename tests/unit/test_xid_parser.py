"""The Xid/SXid parser over a corpus of real line shapes (tests/fixtures/node/xid-corpus.log, sources in README.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fmdoctor.node.xid import normalise_pci, parse_kernel_log, parse_sxid_log, parse_time

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "node" / "xid-corpus.log"
NOW = datetime(2025, 6, 1, tzinfo=UTC)
BOOT = datetime(2025, 5, 1, tzinfo=UTC)


def cases():
    """(expectation, the real line(s) below it) pairs from the corpus."""
    blocks, current = [], None
    for line in CORPUS.read_text().splitlines():
        if line.startswith("# expect:"):
            current = (line.removeprefix("# expect:").split(), [])
            blocks.append(current)
        elif line.startswith("#") or not line.strip():
            current = None
        elif current is not None:
            current[1].append(line)
    return blocks


def expected_time(text: str) -> datetime | None:
    if text == "-":
        return None
    if text.startswith("boot+"):
        return BOOT + timedelta(seconds=float(text.removeprefix("boot+")))
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("expect, lines", cases(), ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_each_real_line_shape(expect, lines):
    text = "\n".join(lines)
    xids, sxids = parse_kernel_log(text, NOW, BOOT), parse_sxid_log(text, NOW, BOOT)
    if expect == ["none"]:
        assert (xids, sxids) == ([], [])
        return
    kind, code, device = expect[0], int(expect[1]), expect[2]
    if kind == "xid":
        [event] = xids
        assert sxids == [] and (event.xid, event.pci, event.time) == (code, device, expected_time(expect[3]))
    else:
        [event] = sxids
        fatal = {"fatal": True, "nonfatal": False, "unstated": None}[expect[3]]
        assert xids == [] and (event.sxid, event.pci, event.fatal, event.time) == (
            code, device, fatal, expected_time(expect[4]))


def test_the_corpus_covers_every_shape_the_issue_names():
    lines = CORPUS.read_text()
    for shape in ("NVRM: Xid (0000:", "NVRM: Xid (PCI:", "): 79\n", "kern  :warn  :", "+0000 ", ",002811+00:00",
                  "[Fri Aug 30", "SXid (PCI:", "<3>["):
        assert shape in lines, shape
    assert len(cases()) >= 25


def test_process_and_message_are_split_and_unknown_process_is_none():
    [known] = parse_kernel_log("NVRM: Xid (PCI:0000:a8:00): 94, pid=51877, name=python3, Contained: SM (0x1).", NOW)
    assert (known.process, known.message) == ("python3", "Contained: SM (0x1).")
    [unknown] = parse_kernel_log("NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
                                 "off the bus.", NOW)
    assert unknown.process is None and unknown.message == "GPU has fallen off the bus."


def test_a_fallen_off_the_bus_line_after_its_xid_79_is_not_counted_twice():
    text = ("2025-03-04T02:47:13+0000 h kernel: NVRM: Xid (PCI:0000:ca:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.\n2025-03-04T02:47:13+0000 h kernel: NVRM: GPU 0000:ca:00.0: GPU has fallen "
            "off the bus.\n")
    [event] = parse_kernel_log(text, NOW)
    assert not event.inferred


def test_monotonic_seconds_without_a_boot_time_are_no_time():
    assert parse_time("[ 8123.617543] NVRM: Xid (0000:03:00): 14, x", NOW) is None


@pytest.mark.parametrize("bdf, gpu, switch", [
    ("PCI:0000:53:00", "PCI:0000:53:00", "PCI:0000:53:00"),
    ("0000:10:1C", "PCI:0000:10:1c", "PCI:0000:10:1c"),
    ("00000000:53:00.0", "PCI:0000:53:00", "PCI:0000:53:00.0"),
    ("18:00.0", "PCI:0000:18:00", "PCI:0000:18:00.0"),
])
def test_normalise_pci(bdf, gpu, switch):
    assert normalise_pci(bdf) == gpu and normalise_pci(bdf, function=True) == switch
