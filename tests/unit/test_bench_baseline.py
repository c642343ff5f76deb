"""bench/check_scale.py --baseline: a commit's fmdoctor laid out as installed (checks/ and the others under
fmdoctor.*) is what a measured child imports, and the before/after table reads both runs of a size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fmdoctor

BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench"
pytestmark = pytest.mark.skipif(not (BENCH / "check_scale.py").exists() or not (BENCH.parent / ".git").exists(),
                                reason="needs the source tree and its git history")


@pytest.fixture(scope="module")
def check_scale():
    sys.path.insert(0, str(BENCH))
    try:
        import check_scale

        yield check_scale
    finally:
        sys.path.remove(str(BENCH))
        for name in ("check_scale", "reachability", "p5_world", "scale_world", "results_file"):
            sys.modules.pop(name, None)


def test_the_baseline_tree_is_what_a_child_imports(check_scale, tmp_path):
    tree = check_scale.baseline_tree("HEAD", tmp_path)
    assert (tree / "fmdoctor" / "checks" / "__init__.py").exists() and (tree / "fmdoctor" / "engine").is_dir()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", "import fmdoctor.checks, fmdoctor.metrics.cloudwatch as c; "
                           "print(fmdoctor.checks.__file__); print(c.__file__)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True)
    assert all(line.startswith(str(tree)) for line in done.stdout.split()), done.stdout


def test_before_after_reads_both_runs_of_a_size(check_scale):
    run = check_scale.CheckRun(256, 9.0, 2.0, 170.0, 1, {"ec2.DescribeInstances": 1}, {("gpu-idle", "i-1")},
                               set(), [], {}, 8.0, {"cpu_s": 4.0, "peak_rss_mib": 200.0, "wall_s": 12.0, "calls": 1,
                                                  "load": 7.5, "found": {("gpu-idle", "i-1")}})
    unmeasured = check_scale.CheckRun(16, 1.0, 1.0, 100.0, 1, {}, set(), set(), [], {})
    table = check_scale.before_after([unmeasured, run], "abc1234")
    rows = [line for line in table.splitlines() if line.startswith("| 2")]
    assert rows == ["| 256 | 4.00 / 2.00 | 0.50x | 200 / 170 | 12.0 / 9.0 | 1 / 1 | yes | 7.5 / 8.0 |"]
    assert "`abc1234`" in table and "| 16 |" not in table
