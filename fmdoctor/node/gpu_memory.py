"""Row remapping (Ampere and newer) and retired pages (older GPUs): `nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT`.

What they mean, per NVIDIA's "GPU Memory Error Management" guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt,
"Error Recovery and Response Flags"): a pending remap "will happen at the next GPU reset" and "unaffected
applications can continue running ... and new workloads can be launched", so it asks for a reset at the next
window; a remapping failure is NVIDIA's RMA criterion (the GPU has no spare rows left), so the GPU must be
replaced. On GPUs with dynamic page retirement instead (Volta and older; docs.nvidia.com/deploy/dynamic-page-
retirement), pages pending retirement are retired when the driver reloads ("reload the driver to activate").
Values nvidia-smi prints as N/A (the other mechanism, or a MIG-enabled GPU) stay None: not read, not healthy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMMAND = ("nvidia-smi", "-q", "-d", "ROW_REMAPPER,PAGE_RETIREMENT")
_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_FIELD = re.compile(r"^(\s+)([^:]+?)\s*:\s*(.*?)\s*$")


@dataclass(frozen=True)
class GpuMemory:
    bus_id: str
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_single_bit: int | None = None
    retired_double_bit: int | None = None
    retirement_pending: bool | None = None

    @property
    def read(self) -> bool:
        """Either mechanism reported something (a GPU where both are N/A was not read)."""
        return self.remap_pending is not None or self.remap_failure is not None or self.retirement_pending is not None


def _flag(value: str) -> bool | None:
    return {"yes": True, "no": False}.get(value.lower())


def _count(value: str) -> int | None:
    return int(value) if value.isdigit() else None


def parse(output: str) -> list[GpuMemory]:
    gpus: list[GpuMemory] = []
    bus: str | None = None
    section = ""
    values: dict[str, dict[str, str]] = {}

    def close() -> None:
        if bus is not None:
            remap, retired = values.get("remapped rows", {}), values.get("retired pages", {})
            gpus.append(GpuMemory(
                bus_id=bus,
                remapped_correctable=_count(remap.get("correctable error", "")),
                remapped_uncorrectable=_count(remap.get("uncorrectable error", "")),
                remap_pending=_flag(remap.get("pending", "")),
                remap_failure=_flag(remap.get("remapping failure occurred", "")),
                retired_single_bit=_count(retired.get("single bit ecc", "")),
                retired_double_bit=_count(retired.get("double bit ecc", "")),
                retirement_pending=_flag(retired.get("pending page blacklist", retired.get("pending page retirement",
                                                                                           ""))),
            ))

    for line in output.splitlines():
        if match := _GPU.match(line):
            close()
            bus, section, values = match.group(1), "", {}
            continue
        if bus is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        key, value = key.strip().lower(), value.strip()
        if indent <= 4:
            section = key
            values.setdefault(section, {})
        elif indent <= 8 and section:
            values[section][key] = value
    close()
    return gpus
