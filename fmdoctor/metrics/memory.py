"""When accelerator memory means trouble, from its per-period series beside utilization.

``memory.used`` (nvidia-smi, DCGM ``FB_USED``) counts what the framework's caching allocator holds, not live
tensors, and LLM servers pre-allocate most of the GPU on purpose (vLLM ``gpu_memory_utilization``), so 95 %+
on a healthy large job is normal. Two patterns are not:

* **ceiling and collapse**: memory at the ceiling while utilization falls well below its own earlier level
  (allocator retries and cache flushes, a rank stuck after an out-of-memory error);
* **steady growth**: memory rising period after period across the window (a leak: tensors kept for logging,
  a growing cache), which ends in an out-of-memory error. A job that starts inside the window jumps once and
  then holds flat, which is not steady growth.

A CUDA out-of-memory error itself is raised inside the process and logs no Xid, so no metric shows it; these
are the signals the metrics do show.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fmdoctor.metrics.model import UTILIZATION, DeviceMetrics

CEILING_AND_COLLAPSE = "ceiling-and-collapse"
STEADY_GROWTH = "steady-growth"
MIN_PERIODS = 3  # fewer cannot show a trend
RISE_TOLERANCE = 0.1  # points: a step that rises less than this is flat (sampling noise)


@dataclass(frozen=True)
class MemoryTrouble:
    device: str
    basis: str  # CEILING_AND_COLLAPSE or STEADY_GROWTH
    memory_percent: float  # the latest period's
    detail: dict[str, Any] = field(default_factory=dict)


def memory_trouble(device: DeviceMetrics, ceiling: float, collapse_percent: float,
                   growth_points: float) -> MemoryTrouble | None:
    memory = device.memory_percents()
    if len(memory) < MIN_PERIODS:
        return None
    return (_ceiling_and_collapse(device, memory, ceiling, collapse_percent)
            or _steady_growth(device.device, memory, growth_points))


def _ceiling_and_collapse(device: DeviceMetrics, memory: list[tuple[Any, float]], ceiling: float,
                          collapse_percent: float) -> MemoryTrouble | None:
    utilization = list(device.signals.get(UTILIZATION, ()))
    if len(utilization) < MIN_PERIODS:
        return None
    recent_count = max(1, len(utilization) // 3)
    before, recent = utilization[:-recent_count], utilization[-recent_count:]
    since = recent[0][0]
    recent_memory = [v for t, v in memory if t >= since]
    if not recent_memory or max(recent_memory) < ceiling:
        return None
    before_mean = sum(v for _, v in before) / len(before)
    recent_mean = sum(v for _, v in recent) / len(recent)
    if before_mean <= 0 or recent_mean > before_mean * (1 - collapse_percent / 100):
        return None
    return MemoryTrouble(device.device, CEILING_AND_COLLAPSE, round(memory[-1][1], 1), {
        "utilization_before_percent": round(before_mean, 1),
        "utilization_recent_percent": round(recent_mean, 1),
        "recent_since": since.isoformat(timespec="seconds"),
        "peak_memory_recent_percent": round(max(recent_memory), 1),
    })


def _steady_growth(device: str, memory: list[tuple[Any, float]], growth_points: float) -> MemoryTrouble | None:
    values = [v for _, v in memory]
    steps = [b - a for a, b in zip(values, values[1:], strict=False)]
    rising = sum(1 for s in steps if s >= RISE_TOLERANCE)
    rise = values[-1] - values[0]
    # Every step but at most one rises, including the last: growth that goes on, not a job's start.
    if rise < growth_points or rising < len(steps) - 1 or steps[-1] < RISE_TOLERANCE or min(steps) < -RISE_TOLERANCE:
        return None
    per_period = rise / len(steps)
    return MemoryTrouble(device, STEADY_GROWTH, round(values[-1], 1), {
        "first_percent": round(values[0], 1),
        "rise_points": round(rise, 1),
        "periods_to_full": round((100.0 - values[-1]) / per_period, 1) if per_period > 0 else None,
    })
