"""bench/check_scale.py --quick: ``fmdoctor check`` against ThreadedMotoServer at two sizes finds the planted
faults, stays within the API-call lower bound (no call per node), measures a healthy p5-density world, and
writes its table where it is told."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fmdoctor

# End to end, so out of the fast tier (`pytest -m "not e2e"`): a benchmark's smoke run: the CLI against a scale
# world on moto's server.
pytestmark = pytest.mark.e2e


BENCH = Path(fmdoctor.__file__).resolve().parent.parent / "bench" / "check_scale.py"


@pytest.mark.skipif(not BENCH.exists(), reason="needs the source tree")
def test_quick_scale_benchmark(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\nkept\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--results", str(results)], capture_output=True,
                          text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\nkept\n")  # other sections are left alone
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| 8 |") or line.startswith("| 32 |")]
    check_rows = [r for r in rows if len(r) == 14]
    assert [r[1].strip() for r in check_rows] == ["8", "32"]
    [p5] = [r for r in rows if len(r) == 11]  # the p5-density world at 8 nodes: 33 interfaces a node
    assert p5[2].strip() == "264" and p5[7].strip() == "1 / 1"
    cpu, peak, wall, exit_code, findings, cloudwatch = (x.strip() for x in p5[8].split(","))
    assert (exit_code, findings) == ("0", "0")  # healthy, and check --only efa says so
    assert float(cpu) > 0 and 0 < float(peak) < 1024  # the child's own peak, not the parent's moto
    for row in check_rows:
        made, bound = (int(x) for x in row[9].split("/"))
        assert made <= bound and row[11].strip() == "1"  # the planted warnings, nothing unknown
    reach = [line.split("|") for line in text.splitlines()
             if "| 2 subnets |" in line or "| 800 classes |" in line]
    assert [(r[1].strip(), r[2].strip(), r[8].strip()) for r in reach] == [
        ("8", "2 subnets", "yes"), ("32", "2 subnets", "yes"), ("800", "800 classes", "yes")]


def test_results_section_is_replaced_not_appended(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_check_scale", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts bench/ on it
    monkeypatch.setitem(sys.modules, "bench_check_scale", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    results = tmp_path / "RESULTS.md"
    bench.write_results(results, "first\n")
    bench.write_results(results, "second\n")
    text = results.read_text()
    assert text.count("<!-- check_scale:start -->") == 1 and text.count("<!-- check_scale:end -->") == 1
    assert "second" in text and "first" not in text
    assert bench.pages("ec2.DescribeInstances", 2048) == 3 and bench.pages("cloudwatch.ListMetrics", 256) == 25
