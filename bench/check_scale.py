"""Benchmark: ``fmdoctor check`` (every check) over synthetic GPU clusters of 16, 256 and 2,048 nodes.

    python bench/check_scale.py                    # 16, 256, 2,048 nodes; writes bench/RESULTS.md
    python bench/check_scale.py --quick            # 8 and 32 nodes, no file written (CI smoke test)

moto's ThreadedMotoServer runs on 127.0.0.1 in this process; each size is seeded into it through the
ordinary APIs (bench/scale_world.py: p4d nodes with 4 EFA interfaces each, 8 GPUs of CloudWatch agent
metrics each, every 8th node Spot, an S3 checkpoint location, a Spot event queue) and then the installed
CLI runs as a child process, ``fmdoctor check --format json`` against the server, exactly as a user
runs it. Reported per size:

- wall time of the check and its growth per node against the previous size; peak memory (max RSS of the
  child, from wait4, so moto's memory is not counted);
- API calls per service against the lower bound. APIs whose listing grows with the cluster are bounded
  by the pages they need at their maximum page size (DescribeInstances 1,000 instances; ListMetrics 500
  series per metric name; GetMetricData 500 queries; DescribeSpotInstanceRequests 200 instance ids per
  filter); every other API must make as many calls as at the smallest size: no call per node;
- the all-pairs EFA reachability for the same node counts, class-based against naive
  (bench/reachability.py's functions).

Exits 1 if a run makes more calls than the bound, misses a planted fault, or the reachability verdicts
disagree. moto's latency is not AWS's: the call counts transfer, absolute times do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import boto3  # noqa: E402
import reachability  # noqa: E402  (bench/reachability.py)
import yaml  # noqa: E402
from scale_world import EFA_INTERFACES, GPUS, REGION, SPOT_EVERY, seed_world  # noqa: E402

# op -> (page size, items(nodes)): the listings whose pages grow with the cluster.
GPU_METRICS = 5  # utilization, memory used and total, power, SM clock
PAGED = {
    "ec2.DescribeInstances": (1000, lambda n: n),
    "ec2.DescribeSpotInstanceRequests": (200, lambda n: max(1, n // SPOT_EVERY)),
    "cloudwatch.ListMetrics": (500, lambda n: n * GPUS),  # per GPU metric name
    "cloudwatch.GetMetricData": (500, lambda n: n * GPUS * GPU_METRICS),
}
PAGES_PER_ITEM_SET = {"cloudwatch.ListMetrics": GPU_METRICS}
RESULTS = HERE / "RESULTS.md"
NOTES = (
    "Lower bound: pages at each API's maximum page size for the listings that grow with the cluster "
    "(DescribeInstances 1,000 instances, DescribeSpotInstanceRequests 200 instance ids per filter, ListMetrics "
    "500 series per metric name, GetMetricData 500 queries); every other API as many calls as at the smallest "
    "size. moto pages DescribeInstances by reservation (up to 500 instances each here), so it answers 2,048 "
    "nodes in one page where AWS needs 3: made can be under the bound, never over. Wall time includes "
    "moto answering in the parent process (its CPU is not in 'its CPU s') and the child's Python start-up "
    "(about 2 s); max RSS is the child's alone. The reachability table uses bench/reachability.py's synthetic "
    "inventories (4 EFA interfaces a node); naive times marked ~ are extrapolated from a sample of pairs."
)
START, END = "<!-- check_scale:start -->", "<!-- check_scale:end -->"


def pages(op: str, nodes: int) -> int:
    size, items = PAGED[op]
    return PAGES_PER_ITEM_SET.get(op, 1) * math.ceil(items(nodes) / size)


@dataclass
class CheckRun:
    nodes: int
    wall_s: float
    cpu_s: float  # the check's own CPU (user + system): the rest of the wall time is moto answering
    max_rss_mib: float
    exit_code: int
    calls: dict[str, int]
    found: set[tuple[str, str]]
    planted: set[tuple[str, str]]
    errors: list[str]
    seed_s: dict[str, float]

    def bounds(self, base: CheckRun) -> dict[str, int]:
        """Per op: the pages at this size for a paged listing, else what the smallest run made."""
        ops = set(self.calls) | set(base.calls)
        return {op: base.calls.get(op, 0) - (pages(op, base.nodes) if op in PAGED else 0)
                + (pages(op, self.nodes) if op in PAGED else 0) for op in sorted(ops)}

    def by_service(self, counts: dict[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for op, n in counts.items():
            out[op.split(".")[0]] = out.get(op.split(".")[0], 0) + n
        return dict(sorted(out.items()))


def start_server() -> tuple[Any, str]:
    import logging

    from moto.server import ThreadedMotoServer

    from fmdoctor.demo import moto_compat

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    moto_compat.install()  # the server runs in this process: the same fidelity patches as the demo
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def run_check(url: str, cluster: str, settings: dict[str, Any], workdir: Path) -> tuple[float, float, float, int, dict]:
    """The installed CLI as a child: (wall s, CPU s, max RSS MiB, exit code, JSON report)."""
    config = workdir / f"{cluster}.yaml"
    config.write_text(yaml.safe_dump({"region": REGION, "clusters": {cluster: settings}}))
    out = workdir / f"{cluster}.json"
    argv = [sys.executable, "-m", "fmdoctor", "check", "--cluster", cluster, "--config", str(config),
            "--endpoint-url", url, "--region", REGION, "--format", "json"]
    started = time.perf_counter()
    with out.open("w") as stdout:
        child = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL, env=os.environ.copy())
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024, child.returncode, json.loads(out.read_text())


def measure(url: str, nodes: int, workdir: Path) -> CheckRun:
    urllib_reset(url)
    cluster = f"bench-{nodes}"
    world = seed_world(boto3.Session(region_name=REGION), cluster, nodes, time.perf_counter)
    wall, cpu, rss, code, report = run_check(url, cluster, world.settings(), workdir)
    found = {(f["check"], f["resource"]) for f in report["findings"]}
    errors = [f"{e['check']}: {e['code']}" for e in report["errors"]]
    return CheckRun(nodes, wall, cpu, rss, code, report["stats"]["api_calls"], found, world.planted, errors,
                    world.seed_s)


def urllib_reset(url: str) -> None:
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=60).read()


def reachability_rows(sizes: list[int], budget: int) -> list[dict[str, Any]]:
    import random

    rng = random.Random(7)
    rows = []
    for size in sizes:
        inventory = reachability.synthetic_inventory(size, EFA_INTERFACES)
        nodes = inventory.instances
        total = size * (size - 1)
        sample = ([(a, b) for a in nodes for b in nodes if a is not b] if total <= budget else
                  [(a, b) for a, b in ((rng.choice(nodes), rng.choice(nodes)) for _ in range(budget)) if a is not b])
        seconds, findings = reachability.class_based(inventory)
        naive_s, naive_verdicts = reachability.naive(inventory, sample)
        verdicts, class_pairs, _ = reachability.class_verdicts(inventory, sample)
        rows.append({"nodes": size, "class_pairs": class_pairs, "class_s": seconds,
                     "naive_s": naive_s * total / max(1, len(sample)), "extrapolated": total > budget,
                     "agree": verdicts == naive_verdicts and findings > 0})
    return rows


def problems_of(runs: list[CheckRun], reach: list[dict[str, Any]]) -> list[str]:
    problems = []
    base = runs[0]
    for run in runs:
        over = {op: (run.calls.get(op, 0), bound) for op, bound in run.bounds(base).items()
                if run.calls.get(op, 0) > bound}
        if over:
            problems.append(f"{run.nodes} nodes: calls over the bound {over}")
        if not run.planted <= run.found:
            problems.append(f"{run.nodes} nodes: planted faults not found: {sorted(run.planted - run.found)}")
        if run.exit_code not in (1, 2):  # planted warnings: neither healthy (0) nor unable to run (3)
            problems.append(f"{run.nodes} nodes: exit status {run.exit_code}")
    problems += [f"reachability {r['nodes']}: class-based and naive verdicts differ" for r in reach if not r["agree"]]
    return problems


def markdown(runs: list[CheckRun], reach: list[dict[str, Any]], quick: bool) -> str:
    base = runs[0]
    lines = ["| nodes | EFA ENIs | GPU series | check wall s | its CPU s | wall per node | growth per node "
             "| max RSS MiB | API calls (made / lower bound) | by service | exit |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    previous = None
    for run in runs:
        bounds = run.bounds(base)
        made, bound = sum(run.calls.values()), sum(bounds.values())
        per_node = run.wall_s / run.nodes
        growth = f"{per_node / previous:.2f}x" if previous else "-"
        services = ", ".join(f"{svc} {n}/{run.by_service(bounds).get(svc, 0)}"
                             for svc, n in run.by_service(run.calls).items())
        lines.append(f"| {run.nodes:,} | {run.nodes * EFA_INTERFACES:,} | {run.nodes * GPUS:,} | {run.wall_s:.1f} | "
                     f"{run.cpu_s:.1f} | {per_node * 1000:.1f} ms | {growth} | {run.max_rss_mib:.0f} | "
                     f"{made} / {bound} | {services} | {run.exit_code} |")
        previous = per_node
    lines += ["", "| nodes | class pairs | class-based | naive (all ordered node pairs) | speed-up | agree |",
              "|---:|---:|---:|---:|---:|---|"]
    for r in reach:
        mark = "~" if r["extrapolated"] else ""
        lines.append(f"| {r['nodes']:,} | {r['class_pairs']} | {r['class_s'] * 1000:.1f} ms | "
                     f"{mark}{r['naive_s']:.2f} s | {r['naive_s'] / max(r['class_s'], 1e-9):,.0f}x | "
                     f"{'yes' if r['agree'] else 'NO'} |")
    seeds = "; ".join(f"{r.nodes:,} nodes: " + ", ".join(f"{k} {v:.0f}s" for k, v in r.seed_s.items()) for r in runs)
    lines += ["", NOTES, "", f"Seeding through the APIs (not timed above): {seeds}.", ""]
    errors = sorted({e for r in runs for e in r.errors})
    if errors:
        lines.append(f"Error entries (same at every size): {', '.join(errors)}.")
    return "\n".join(lines) + ("\n\n_--quick run_\n" if quick else "\n")


def write_results(path: Path, table: str) -> None:
    header = ("# Benchmark results\n\nProduced by the scripts in bench/ on the development machine (2 shared "
              "CPU cores); re-run them to refresh a section.\n")
    text = path.read_text() if path.exists() else header
    section = f"{START}\n## fmdoctor check at scale (bench/check_scale.py)\n\n{table}{END}"
    if START in text:
        text = text[: text.index(START)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 and 32 nodes, nothing written (CI smoke test)")
    parser.add_argument("--sizes", help="comma-separated node counts (default 16,256,2048)")
    parser.add_argument("--naive-pairs", type=int, default=20000, help="pairs the naive reachability measures")
    parser.add_argument("--results", type=Path, help=f"Markdown file to write (default {RESULTS}, not with --quick)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [8, 32] if args.quick else [16, 256, 2048]
    results = args.results or (None if args.quick else RESULTS)
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": REGION, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
                       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                       "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1,localhost"})
    os.environ.pop("AWS_PROFILE", None)
    server, url = start_server()
    os.environ["AWS_ENDPOINT_URL"] = url  # the seeding clients in this process talk to the server too
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = []
            for n in sizes:
                runs.append(measure(url, n, Path(tmp)))
                print(f"{n} nodes: check {runs[-1].wall_s:.1f}s, {sum(runs[-1].calls.values())} calls", flush=True)
    finally:
        server.stop()
    reach = reachability_rows(sizes, 1000 if args.quick else args.naive_pairs)
    table = markdown(runs, reach, args.quick)
    print(table)
    if results:
        write_results(results, table)
    problems = problems_of(runs, reach)
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
