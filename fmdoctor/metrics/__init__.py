"""Metrics at cluster scale: CloudWatch discovery and batched fetches, the Prometheus HTTP API (DCGM and EFA
exporters, Amazon Managed Service for Prometheus), naming nodes, robust statistics, per-node views."""

from __future__ import annotations


def percent(part: float | None, whole: float | None) -> float | None:
    """``part`` as a percentage of ``whole``; None when either is unknown or the whole is zero."""
    if part is None or not whole:
        return None
    return 100.0 * part / whole
