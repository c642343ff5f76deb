"""bench/reachability.py --quick runs in seconds and its class-based verdicts agree with the naive ones (in the
800-class world too)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fmdoctor

# End to end, so out of the fast tier (`pytest -m "not e2e"`): a benchmark's smoke run.
pytestmark = pytest.mark.e2e


BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench" / "reachability.py"


@pytest.mark.skipif(not BENCH.exists(), reason="needs the source tree")
def test_quick_benchmark_runs_and_agrees():
    done = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [(row[0], row[2]) for row in rows] == [("50", "subnets"), ("500", "subnets"), ("800", "classes")]
    assert all(row[-1] == "yes" for row in rows)  # same verdict for every sampled pair
