"""Robust statistics for "one node is well below the others": median, MAD and the modified z-score.

Means and standard deviations are dragged by the very outlier being looked for; the median and the
median absolute deviation (MAD) are not (Iglewicz and Hoaglin's modified z-score, 0.6745 (x - median) / MAD,
|z| > 3.5 being their suggested cut-off). An outlier must also be a minimum absolute gap below the median,
so a tight cluster's natural 2-point spread is never called a straggler.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

MIN_POPULATION = 3  # with two values the median sits halfway: no way to say which one is slow
# Averages of percentages spread by less than this are noise; flooring the MAD keeps identical
# values (MAD 0) from turning a small difference into an infinite score.
MAD_FLOOR = 1.0
_CONSISTENCY = 0.6745  # makes the MAD estimate the standard deviation for normal data


@dataclass(frozen=True)
class Outlier:
    key: str
    value: float
    median: float
    mad: float
    z: float

    @property
    def gap(self) -> float:
        return self.median - self.value


def median_and_mad(values: list[float]) -> tuple[float, float]:
    middle = statistics.median(values)
    return middle, statistics.median(abs(v - middle) for v in values)


def modified_z(value: float, middle: float, mad: float) -> float:
    return _CONSISTENCY * (value - middle) / max(mad, MAD_FLOOR)


def low_outliers(values: Mapping[str, float], z_threshold: float, min_gap: float) -> list[Outlier]:
    """Keys whose value is both ``z_threshold`` modified z-scores and ``min_gap`` below the median."""
    if len(values) < MIN_POPULATION:
        return []
    middle, mad = median_and_mad(list(values.values()))
    found = []
    for key, value in values.items():
        z = modified_z(value, middle, mad)
        if z <= -z_threshold and middle - value >= min_gap:
            found.append(Outlier(key, value, middle, mad, z))
    return sorted(found, key=lambda o: o.z)


def relative_low_outliers(values: Mapping[str, float], z_threshold: float, min_drop_percent: float) -> list[Outlier]:
    """Like :func:`low_outliers`, with the minimum gap a share of the median: for signals in their own units
    (watts, MHz), where a fixed number of points means nothing."""
    if len(values) < MIN_POPULATION:
        return []
    middle = statistics.median(values.values())
    return low_outliers(values, z_threshold, abs(middle) * min_drop_percent / 100)
