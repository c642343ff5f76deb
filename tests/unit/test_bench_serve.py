"""bench/serve.py --quick runs and every event of both bursts is posted exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fmdoctor

# End to end, so out of the fast tier (`pytest -m "not e2e"`): a benchmark's smoke run: `fmdoctor serve` over a
# burst of events.
pytestmark = pytest.mark.e2e


BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench" / "serve.py"


@pytest.mark.skipif(not BENCH.exists(), reason="needs the source tree")
def test_quick_benchmark(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    burst, baseline = json.loads(out.read_text())
    assert burst["posted"] == burst["posts"] == baseline["posted"] == 40
    assert burst["in_flight_max"] <= burst["concurrency"] and baseline["in_flight_max"] == 1
    assert burst["doctor_runs"] <= burst["doctor_runs_bound"]
    assert "p99 event→post s" in done.stdout
