"""``bench/fleet.py --quick`` is the fleet's CI smoke test: every cluster reported with its seeded verdict,
no scope failed, and no more API calls than the lower bound (it asserts no timing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import fmdoctor

BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench" / "fleet.py"

# End to end, so out of the fast tier (`pytest -m "not e2e"`): a benchmark's smoke run: fleet scans over seeded
# accounts.
pytestmark = [pytest.mark.skipif(not BENCH.exists(), reason="needs the source tree"), pytest.mark.e2e]


def test_quick_fleet_benchmark_passes(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_fleet", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_fleet", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--latency-ms", "1"]) == 0
    out = capsys.readouterr().out
    assert "fleet (concurrency 16)" in out and "lower bound" in out
    assert bench.lower_bound(3, 6, 12, 6) == 1 + 3 + 12 + 72
