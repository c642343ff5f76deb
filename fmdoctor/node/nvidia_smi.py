"""``nvidia-smi --query-gpu`` as CSV: one row per GPU the driver can see, parsed without guessing.

Fields that are ``[N/A]`` (no ECC on this model) become None; ``[GPU requires reset]``, ``[Unknown Error]``
or a line that does not parse at all mark a GPU the driver has lost.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

from fmdoctor.metrics import percent

FIELDS = ("index", "name", "uuid", "pci.bus_id", "utilization.gpu", "memory.used", "memory.total",
          "temperature.gpu", "ecc.errors.uncorrected.volatile.total")
COMMAND = ("nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits")
_NOT_AVAILABLE = {"[N/A]", "N/A", "[Not Supported]", ""}


@dataclass(frozen=True)
class GpuRow:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    utilization: float | None
    memory_used: float | None
    memory_total: float | None
    temperature: float | None
    ecc_uncorrected: int | None
    lost: str | None = None  # e.g. "[GPU requires reset]" in a numeric field

    @property
    def memory_percent(self) -> float | None:
        return percent(self.memory_used, self.memory_total)


@dataclass(frozen=True)
class Parsed:
    gpus: list[GpuRow]
    unreadable: list[str]  # lines that name a GPU the driver could not read


def _number(value: str) -> tuple[float | None, str | None]:
    value = value.strip()
    if value in _NOT_AVAILABLE:
        return None, None
    try:
        return float(value), None
    except ValueError:
        return None, value  # "[GPU requires reset]", "[Unknown Error]"


def parse(output: str) -> Parsed:
    gpus, unreadable = [], []
    for line in output.splitlines():
        if not line.strip():
            continue
        row = next(csv.reader([line], skipinitialspace=True))
        if len(row) != len(FIELDS) or not row[0].strip().isdigit():
            unreadable.append(line.strip())
            continue
        numbers = [_number(v) for v in row[4:]]
        lost = next((problem for _, problem in numbers if problem), None)
        ecc = numbers[4][0]
        gpus.append(GpuRow(
            index=int(row[0]), name=row[1].strip(), uuid=row[2].strip(), pci_bus_id=row[3].strip(),
            utilization=numbers[0][0], memory_used=numbers[1][0], memory_total=numbers[2][0],
            temperature=numbers[3][0], ecc_uncorrected=None if ecc is None else int(ecc), lost=lost,
        ))
    return Parsed(gpus, unreadable)


def pci_key(bus_id: str) -> str:
    """'00000000:53:00.0' and Xid's 'PCI:0000:53:00' name the same GPU: compare on bus and device ('53:00')."""
    parts = bus_id.removeprefix("PCI:").split(":")
    return ":".join(p.split(".")[0] for p in parts[-2:]).lower()
