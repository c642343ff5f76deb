"""bench/gpu_checks.py --quick runs, makes no more CloudWatch calls than the lower bound, and finds what it plants."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fmdoctor

# End to end, so out of the fast tier (`pytest -m "not e2e"`): a benchmark's smoke run.
pytestmark = pytest.mark.e2e


BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench" / "gpu_checks.py"


@pytest.mark.skipif(not BENCH.exists(), reason="needs the source tree")
def test_quick_benchmark(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads(out.read_text())
    assert row["nodes"] == 10 and row["series"] == 80 and row["found_planted"]
    assert (row["list_calls"], row["get_calls"]) == (row["list_bound"], row["get_bound"]) == (5, 1)
    assert row["naive_calls"] == 60  # 5 ListMetrics + 1 GetMetricData per node
    assert "ListMetrics" in done.stdout
