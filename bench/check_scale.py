"""Benchmark: ``fmdoctor check`` (every check) over synthetic GPU clusters of 16, 256 and 2,048 nodes.

    python bench/check_scale.py                    # 16, 256, 2,048 nodes; p5: 256, 512, 2,048; writes bench/RESULTS.md
    python bench/check_scale.py --quick            # 8 and 32 nodes, p5: 8, no file written (CI smoke test)
    python bench/check_scale.py --baseline REV     # each p4d size also checked by fmdoctor at REV: before/after

moto's ThreadedMotoServer runs on 127.0.0.1 in a process of its own (bench/world_server.py), which seeds
each size (bench/scale_world.py: p4d nodes with 4 EFA interfaces each, 8 GPUs of CloudWatch agent
metrics each, every 8th node Spot, an S3 checkpoint location, a Spot event queue); then the installed
CLI runs as a child process, ``fmdoctor check --format json`` against the server, exactly as a user
runs it, under bench/measured.py, which reports the child's own CPU time and peak memory (VmHWM: wait4's
figure counted the parent's memory, and the parent used to hold moto). Reported per size:

- wall time of the check and its growth per node against the previous size; the child's CPU time and
  peak memory;
- API calls per service against the lower bound. APIs whose listing grows with the cluster are bounded
  by the pages they need at their maximum page size (DescribeInstances 1,000 instances; ListMetrics 500
  series per metric name; GetMetricData 500 queries; DescribeSpotInstanceRequests 200 instance ids per
  filter); every other API must make as many calls as at the smallest size: no call per node;
- the all-pairs EFA reachability for the same node counts, class-based against naive
  (bench/reachability.py's functions).

The p5-density world (bench/p5_world.py: p5.48xlarge nodes with 32 EFA interfaces each, healthy) measures
the inventory alone (min and median of ``--repeat`` runs: CPU, wall, peak memory, and what start-up costs
before the listing) and ``fmdoctor check --only efa``, which must find nothing wrong.

Exits 1 if a run makes more calls than the bound, misses a planted fault, or the reachability verdicts
disagree. moto's latency is not AWS's: the call counts transfer, absolute times do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# bench/ for its sibling modules; fmdoctor comes from the installed package (editable or not), never the
# checkout's fmdoctor/ directory, which lacks the checks/, assistant/... that install under fmdoctor.*
sys.path.insert(0, str(HERE))

import reachability  # noqa: E402  (bench/reachability.py)
import yaml  # noqa: E402
from p5_world import EFA_INTERFACES as P5_EFA_INTERFACES  # noqa: E402
from results_file import write_section  # noqa: E402
from scale_world import EFA_INTERFACES, GPUS, REGION, SPOT_EVERY  # noqa: E402

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
    "moto answering in its own process (its CPU is not in 'its CPU s') and the child's Python start-up; "
    "peak RSS is the child's own high-water mark (VmHWM), not wait4's, which counted the parent's memory. "
    "The reachability table uses bench/reachability.py's synthetic "
    "inventories (4 EFA interfaces a node): '2 subnets' (3 classes), '800 classes' (16 subnets in 4 zones x 50 "
    "node groups); class-based is the whole efa-peer-unreachable check, classes with the same groups judged once "
    "per block pair; naive CPU times marked ~ are extrapolated from a sample of pairs."
)


def pages(op: str, nodes: int) -> int:
    size, items = PAGED[op]
    return PAGES_PER_ITEM_SET.get(op, 1) * math.ceil(items(nodes) / size)


@dataclass
class CheckRun:
    nodes: int
    wall_s: float
    cpu_s: float  # the check's own CPU (user + system): the rest of the wall time is moto answering
    peak_rss_mib: float
    exit_code: int
    calls: dict[str, int]
    found: set[tuple[str, str]]
    planted: set[tuple[str, str]]
    errors: list[str]
    seed_s: dict[str, float]
    load: float = 0.0  # 1-minute load average when the check started
    baseline: dict[str, Any] | None = None  # the same size checked by --baseline's fmdoctor, just before

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


class WorldServer:
    """bench/world_server.py as a child: moto and the seeding live there, never in the measured processes' parent."""

    def __init__(self, env: dict[str, str]):
        self.process = subprocess.Popen([sys.executable, str(HERE / "world_server.py")], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        self.url = self._read()["url"]

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._read()

    def seed(self, world: str, cluster: str, nodes: int) -> dict[str, Any]:
        self.ask(reset=True)
        return self.ask(world=world, cluster=cluster, nodes=nodes)

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("bench/world_server.py ended")
        return json.loads(line)  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # moto stopping slowly on a loaded machine must not lose the figures
            self.process.terminate()
            self.process.wait(timeout=60)


def isolate_environment() -> None:
    """Fake credentials and no profile, metadata service or proxy: the bench talks only to its moto world."""
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_DEFAULT_REGION": REGION, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
                       "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                       "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1,localhost"})
    os.environ.pop("AWS_PROFILE", None)


def measured(args: list[str], workdir: Path, name: str, pythonpath: Path | None = None
             ) -> tuple[dict[str, Any], Path]:
    """bench/measured.py as a child: its own figures, and the file its stdout went to."""
    facts, stdout_path = workdir / f"{name}.facts.json", workdir / f"{name}.out"
    facts.unlink(missing_ok=True)
    env = os.environ.copy()
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    started = time.perf_counter()
    with stdout_path.open("w") as stdout:
        subprocess.run([sys.executable, str(HERE / "measured.py"), str(facts), *args], stdout=stdout,
                       stderr=subprocess.DEVNULL, env=env, check=False)
    if not facts.exists():
        raise RuntimeError(f"{name}: the measured child wrote no figures ({' '.join(args)})")
    out = json.loads(facts.read_text())
    out["outer_wall_s"] = time.perf_counter() - started  # with interpreter start-up
    return out, stdout_path


def write_config(workdir: Path, cluster: str, settings: dict[str, Any]) -> Path:
    config = workdir / f"{cluster}.yaml"
    # moto writes a page of 240 p5 nodes far slower than AWS does: on 2 loaded cores, beyond the default 30s.
    config.write_text(yaml.safe_dump({"region": REGION, "aws": {"read_timeout": "5m"},
                                      "clusters": {cluster: settings}}))
    return config


def run_check(url: str, cluster: str, settings: dict[str, Any], workdir: Path,
              only: str | None = None, pythonpath: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The CLI in a measured child: (its figures, its JSON report); ``pythonpath``: a tree to import fmdoctor from."""
    config = write_config(workdir, cluster, settings)
    argv = ["check", "check", "--cluster", cluster, "--config", str(config), "--endpoint-url", url,
            "--region", REGION, "--format", "json", *(["--only", only] if only else [])]
    facts, out = measured(argv, workdir, f"{cluster}-check{'-baseline' if pythonpath else ''}", pythonpath)
    return facts, json.loads(out.read_text())


def measure(server: WorldServer, nodes: int, workdir: Path, baseline: Path | None = None) -> CheckRun:
    """The check at this size; with ``baseline`` (a source tree), that fmdoctor's check first, on the same world."""
    cluster = f"bench-{nodes}"
    world = server.seed("gpu", cluster, nodes)
    before = None
    if baseline is not None:
        load = os.getloadavg()[0]
        facts, report = run_check(server.url, cluster, world["settings"], workdir, pythonpath=baseline)
        before = {"cpu_s": facts["cpu_s"], "peak_rss_mib": facts["peak_rss_mib"], "wall_s": facts["outer_wall_s"],
                  "calls": sum(report["stats"]["api_calls"].values()), "load": load,
                  "found": {(f["check"], f["resource"]) for f in report["findings"]}}
        print(f"{nodes} nodes, baseline: CPU {facts['cpu_s']:.2f}s", flush=True)
    load = os.getloadavg()[0]
    facts, report = run_check(server.url, cluster, world["settings"], workdir)
    found = {(f["check"], f["resource"]) for f in report["findings"]}
    errors = [f"{e['check']}: {e['code']}" for e in report["errors"]]
    planted = {tuple(p) for p in world["planted"]}
    return CheckRun(nodes, facts["outer_wall_s"], facts["cpu_s"], facts["peak_rss_mib"], facts["exit"],
                    report["stats"]["api_calls"], found, planted, errors, world["seed_s"], load, before)


def p5_row(server: WorldServer, nodes: int, workdir: Path, repeat: int) -> dict[str, Any]:
    """The p5 world's inventory ``repeat`` times, then ``check --only efa`` once."""
    cluster = f"p5-{nodes}"
    world = server.seed("p5", cluster, nodes)
    config = write_config(workdir, cluster, world["settings"])
    loads, inventories = [], []
    for attempt in range(repeat):
        loads.append(os.getloadavg()[0])
        facts, _ = measured(["inventory", str(config), cluster, server.url], workdir, f"{cluster}-inventory-{attempt}")
        inventories.append(facts)
    check, report = run_check(server.url, cluster, world["settings"], workdir, only="efa")
    row = {"nodes": nodes, "interfaces": inventories[0]["interfaces"], "load": loads, "seed_s": world["seed_s"],
           "calls": inventories[0]["api_calls"], "check": check, "check_findings": len(report["findings"]),
           "check_errors": [f"{e['check']}: {e['code']}" for e in report["errors"]],
           "check_calls": report["stats"]["api_calls"]}
    for key in ("cpu_s", "wall_s", "peak_rss_mib", "import_cpu_s", "import_rss_mib"):
        values = [f[key] for f in inventories]
        row[key] = (min(values), statistics.median(values))
    print(f"p5 {nodes} nodes: inventory CPU {row['cpu_s'][1]:.1f}s, peak {row['peak_rss_mib'][1]:.0f} MiB", flush=True)
    return row


def p5_page_bound(nodes: int) -> int:
    """DescribeInstances pages the density rule allows: a first page of FIRST_PAGE instances, then
    INTERFACES_PER_PAGE interfaces' worth (1,000 p5 nodes) a page (fmdoctor/engine/instance_listing.py)."""
    from fmdoctor.engine.instance_listing import FIRST_PAGE, page_size

    rest = max(0, nodes - FIRST_PAGE)
    return 1 + math.ceil(rest / page_size(1, P5_EFA_INTERFACES + 1))


def p5_problems(rows: list[dict[str, Any]]) -> list[str]:
    problems = []
    for row in rows:
        n = row["nodes"]
        pages_made = row["calls"].get("ec2.DescribeInstances", 0)
        if pages_made > p5_page_bound(n):
            problems.append(f"p5 {n} nodes: {pages_made} DescribeInstances pages, more than {p5_page_bound(n)}")
        if any(count > 1 for op, count in row["calls"].items() if op != "ec2.DescribeInstances"):
            problems.append(f"p5 {n} nodes: a describe made more than once: {row['calls']}")
        if row["interfaces"] != n * (P5_EFA_INTERFACES + 1):
            problems.append(f"p5 {n} nodes: {row['interfaces']} interfaces in the inventory")
        if row["check"]["exit"] != 0 or row["check_findings"]:
            problems.append(f"p5 {n} nodes: check --only efa exit {row['check']['exit']}, "
                            f"{row['check_findings']} findings on a healthy cluster")
    return problems


def p5_markdown(rows: list[dict[str, Any]], repeat: int) -> str:
    lines = ["| p5 nodes | interfaces | inventory CPU s (min / median) | wall s | peak RSS MiB | of which start-up "
             "(CPU s, RSS MiB) | DescribeInstances pages (made / at 1,000 a page) | check --only efa: CPU s, "
             "peak MiB, wall s, exit, findings, CloudWatch calls | load |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        c = r["check"]
        cloudwatch = sum(v for k, v in r["check_calls"].items() if k.startswith("cloudwatch."))
        lines.append(
            f"| {r['nodes']:,} | {r['interfaces']:,} | {r['cpu_s'][0]:.1f} / {r['cpu_s'][1]:.1f} | "
            f"{r['wall_s'][0]:.1f} / {r['wall_s'][1]:.1f} | {r['peak_rss_mib'][0]:.0f} / {r['peak_rss_mib'][1]:.0f} | "
            f"{r['import_cpu_s'][1]:.1f}, {r['import_rss_mib'][1]:.0f} | "
            f"{r['calls'].get('ec2.DescribeInstances', 0)} / {math.ceil(r['nodes'] / 1000)} | "
            f"{c['cpu_s']:.1f}, {c['peak_rss_mib']:.0f}, {c['outer_wall_s']:.1f}, {c['exit']}, "
            f"{r['check_findings']}, {cloudwatch} | {' '.join(f'{x:.1f}' for x in r['load'])} |")
    seeds = "; ".join(f"{r['nodes']:,} nodes: " + ", ".join(f"{k} {v:.0f}s" for k, v in r["seed_s"].items())
                      for r in rows)
    errors = sorted({e for r in rows for e in r["check_errors"]})
    return "\n".join(lines) + (
        f"\n\np5-density world (bench/p5_world.py): p5.48xlarge nodes, 33 interfaces each (the ENA primary and 32 "
        f"EFA-only), one reservation a node, healthy. Inventory: the instances part a check run discovers "
        f"(DescribeInstances, groups and rules, subnets, types) in a child of its own, {repeat} runs, min / median; "
        f"CPU and peak RSS (VmHWM) are the child's own, wall includes moto generating the XML. 'start-up' is "
        f"what the child had spent and held after its imports, before the first call. Goal at 2,048 nodes: "
        f"under 300 MiB and under 6 s of CPU. Pages ask for 1,000 nodes, DescribeInstances' maximum (at most "
        f"33,000 interfaces' worth: 1,000 p5 nodes; bench/listing_memory.py measures a page's memory). load: "
        f"the 1-minute load average before each inventory run (2 shared cores). Seeding (not timed "
        f"above): {seeds}.\n" + (f"\nError entries of the check run: {', '.join(errors)}.\n" if errors else ""))


def reachability_rows(sizes: list[int], budget: int, many_classes: list[int]) -> list[dict[str, Any]]:
    """bench/reachability.py's measurement at the same node counts, then its 800-class world."""
    import random

    rng = random.Random(7)
    return ([reachability.measure("2 subnets", size, budget, rng, EFA_INTERFACES) for size in sizes]
            + [reachability.measure("800 classes", size, budget, rng, EFA_INTERFACES) for size in many_classes])


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
             "| peak RSS MiB | API calls (made / lower bound) | by service | exit | load |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    previous = None
    for run in runs:
        bounds = run.bounds(base)
        made, bound = sum(run.calls.values()), sum(bounds.values())
        per_node = run.wall_s / run.nodes
        growth = f"{per_node / previous:.2f}x" if previous else "-"
        services = ", ".join(f"{svc} {n}/{run.by_service(bounds).get(svc, 0)}"
                             for svc, n in run.by_service(run.calls).items())
        lines.append(f"| {run.nodes:,} | {run.nodes * EFA_INTERFACES:,} | {run.nodes * GPUS:,} | {run.wall_s:.1f} | "
                     f"{run.cpu_s:.1f} | {per_node * 1000:.1f} ms | {growth} | {run.peak_rss_mib:.0f} | "
                     f"{made} / {bound} | {services} | {run.exit_code} | {run.load:.1f} |")
        previous = per_node
    lines += ["", "| nodes | world | classes | class pairs (block pairs evaluated) | class-based wall / CPU "
              "| naive CPU (all ordered node pairs in one zone) | speed-up (CPU) | agree |",
              "|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in reach:
        mark = "~" if r["extrapolated"] else ""
        lines.append(f"| {r['nodes']:,} | {r['world']} | {r['classes']} | {r['class_pairs']:,} "
                     f"({r['block_pairs']:,}) | {r['class_s'] * 1000:.1f} / {r['class_cpu_s'] * 1000:.1f} ms | "
                     f"{mark}{r['naive_s']:.2f} s | "
                     f"{r['naive_s'] / max(r['class_cpu_s'], 1e-9):,.0f}x | {'yes' if r['agree'] else 'NO'} |")
    seeds = "; ".join(f"{r.nodes:,} nodes: " + ", ".join(f"{k} {v:.0f}s" for k, v in r.seed_s.items()) for r in runs)
    lines += ["", NOTES, "", f"Seeding through the APIs (not timed above): {seeds}.", ""]
    errors = sorted({e for r in runs for e in r.errors})
    if errors:
        lines.append(f"Error entries (same at every size): {', '.join(errors)}.")
    return "\n".join(lines) + ("\n\n_--quick run_\n" if quick else "\n")


def baseline_tree(rev: str, into: Path) -> Path:
    """fmdoctor as commit ``rev`` installs it (checks/, assistant/... under fmdoctor.*, as setup.py maps them), for
    PYTHONPATH: a measured child imports it before the installed one (the editable finder comes after sys.path)."""
    root = HERE.parent
    src = into / "baseline-src"
    src.mkdir(parents=True, exist_ok=True)
    mapped = {"checks": "checks", "assistant": "assistant", "tui": "tui", "runbooks": "runbooks", "evals": "evals"}
    archive = subprocess.run(["git", "archive", rev, "fmdoctor", *mapped], cwd=root, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    for name, source in mapped.items():
        if (src / source).exists():
            (src / source).rename(src / "fmdoctor" / name)
    return src


def before_after(runs: list[CheckRun], rev: str) -> str:
    """Each size's check at ``--baseline`` and at this checkout, one after the other against the same world."""
    lines = [f"Before and after, in this run: each size's check with fmdoctor at `{rev}` (before), then at this "
             "checkout (after), one after the other against the same seeded world:", "",
             "| nodes | CPU s before / after | after / before | peak RSS MiB before / after | wall s before / after "
             "| API calls before / after | findings the same | load before / after |",
             "|---:|---:|---:|---:|---:|---:|---|---:|"]
    for run in runs:
        b = run.baseline
        if not b:
            continue
        lines.append(f"| {run.nodes:,} | {b['cpu_s']:.2f} / {run.cpu_s:.2f} | {run.cpu_s / b['cpu_s']:.2f}x | "
                     f"{b['peak_rss_mib']:.0f} / {run.peak_rss_mib:.0f} | {b['wall_s']:.1f} / {run.wall_s:.1f} | "
                     f"{b['calls']} / {sum(run.calls.values())} | {'yes' if b['found'] == run.found else 'NO'} | "
                     f"{b['load']:.1f} / {run.load:.1f} |")
    return "\n".join(lines) + "\n"


def write_results(path: Path, table: str) -> None:
    write_section(path, "check_scale", "fmdoctor check at scale (bench/check_scale.py)", table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 and 32 nodes, nothing written (CI smoke test)")
    parser.add_argument("--sizes", help="comma-separated node counts (default 16,256,2048)")
    parser.add_argument("--p5-sizes", help="comma-separated p5 node counts (default 256,512,2048; --quick: 8)")
    parser.add_argument("--repeat", type=int, help="inventory runs per p5 size (default 3; --quick: 1)")
    parser.add_argument("--naive-pairs", type=int, default=20000, help="pairs the naive reachability measures")
    parser.add_argument("--results", type=Path, help=f"Markdown file to write (default {RESULTS}, not with --quick)")
    parser.add_argument("--baseline", help="a commit: each p4d size is also checked with fmdoctor at that commit, "
                        "just before, for a before/after table")
    parser.add_argument("--notes", type=Path, help="a Markdown file of notes (how it was run) ending the section")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [8, 32] if args.quick else [16, 256, 2048]
    p5_sizes = ([int(s) for s in args.p5_sizes.split(",") if s] if args.p5_sizes is not None
                else [8] if args.quick else [256, 512, 2048])
    repeat = args.repeat or (1 if args.quick else 3)
    results = args.results or (None if args.quick else RESULTS)
    isolate_environment()
    server = WorldServer(os.environ.copy())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = []
            baseline = baseline_tree(args.baseline, Path(tmp)) if args.baseline else None
            for n in sizes:
                runs.append(measure(server, n, Path(tmp), baseline))
                print(f"{n} nodes: check {runs[-1].wall_s:.1f}s, {sum(runs[-1].calls.values())} calls", flush=True)
            p5 = [p5_row(server, n, Path(tmp), repeat) for n in p5_sizes]
    finally:
        server.close()
    reach = reachability_rows(sizes, 1000 if args.quick else args.naive_pairs, [800] if args.quick else [5000])
    table = markdown(runs, reach, args.quick)
    if p5:
        table = table.rstrip("\n").removesuffix("_--quick run_").rstrip("\n") + "\n\n" + p5_markdown(p5, repeat)
        table += "\n_--quick run_\n" if args.quick else ""
    if args.baseline:
        table = table.rstrip("\n") + "\n\n" + before_after(runs, args.baseline)
    if args.notes:
        table = table.rstrip("\n") + "\n\n" + args.notes.read_text().strip() + "\n"
    print(table)
    if results:
        write_results(results, table)
    problems = problems_of(runs, reach) + p5_problems(p5)
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
