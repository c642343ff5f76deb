"""Benchmark: sequential AWS round trips of each command, through a proxy that holds every request.

    python bench/rounds.py              # 64 and 256 nodes and the demo's world; writes bench/RESULTS.md
    python bench/rounds.py --full       # 64, 256 and 2,048 nodes and the demo's (seeding 2,048 nodes takes minutes)
    python bench/rounds.py --quick      # 8 nodes, check and why-not only, nothing written (smoke test)

On AWS each call costs 50-150 ms, so a user waits for the calls that wait on one another, not for the
count. moto answers in milliseconds, so bench/latency_proxy.py sits on 127.0.0.1 in front of moto's
ThreadedMotoServer (bench/world_server.py, seeding bench/scale_world.py's p4d cluster) and holds every
request ``--delay-ms``. Each command runs twice as a user runs it (the CLI in a child, bench/measured.py),
at 0 ms and at the delay:

    sequential rounds = (wall at delay - wall at 0) / delay

Wall is the child's own, from its first import to its exit code (no interpreter start-up). Beside it:
'chain', the most calls of the delayed run that followed one another without overlapping (read off the
proxy's record, no second run needed, so steadier on a loaded machine), the child's CPU, the calls the
proxy answered against the lower bound (the smallest size's distinct calls, with the listings that grow
with the cluster at their maximum page size: bench/check_scale.py's PAGED), calls repeated (the same
operation with the same request body twice), and the most calls in flight at once. 'chain' at 100 ms also counts
calls that depend on nothing but started late because their check got the CPU late (2 shared cores, a second of
CPU between calls); one more run at ``--chain-delay-ms`` (default 1,000 ms), where a round is long against that
CPU time, gives the 'chain at 1,000 ms': the depth of the calls' data dependencies, the figure the goals count.

A throttled run (``--throttle``, default 20 % of requests answered with the service's throttling error,
never one request more than twice in a row) of ``check`` at the smallest size must report the same
findings and exit status as the clean run: throttling may slow a run, never lose a finding or report
healthy. ``check --demo`` and ``ask --demo`` are timed as a user starts them (interpreter included).
The demo's world (fmdoctor.demo's cluster, seeded
into the same server by bench/world_server.py) is measured the same way, through the proxy; its Prometheus and
Slurm view live only in the demo's own process, so here they are sources not configured. Exits 1 when the
throttled run lost a finding.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from check_scale import PAGED, WorldServer, isolate_environment, measured, pages, write_config  # noqa: E402
from latency_proxy import Call, LatencyProxy, chain, chain_text, max_in_flight  # noqa: E402
from results_file import write_section  # noqa: E402
from scale_world import REGION  # noqa: E402

RESULTS = HERE / "RESULTS.md"
ACCOUNT = "123456789012"  # moto's account
GOALS = {"check": (6, 7), "check --only efa": (3, 3), "why-not --to head --port 22": (4, 4)}
# Request-rate quotas per account and Region that no order of calls gets past (CloudWatch User Guide, "CloudWatch
# service quotas": "Rate of ListMetrics requests" 25 per second, "Rate of GetMetricData requests" 500 per second;
# both adjustable): a run that makes N such calls needs N / rate seconds on AWS however they overlap.
RATE_QUOTAS = {"cloudwatch.ListMetrics": 25.0, "cloudwatch.GetMetricData": 500.0}


@dataclass
class Row:
    command: str
    nodes: int
    wall0_s: float
    wall_s: float
    cpu_s: float
    peak_mib: float
    exit: int
    chain: int
    in_flight: int
    calls: Counter[str]
    distinct: Counter[str]
    repeated: dict[str, int]
    delay_s: float
    bound: int = 0
    path: str = ""  # the chain's operations
    findings: set[tuple[str, str]] = field(default_factory=set)
    world: str = "p4d"  # bench/scale_world.py's cluster, or "demo" (fmdoctor.demo's, through the same proxy)
    # The chain again in a run at a long delay (--chain-delay-ms): there a round is long against the CPU time between
    # calls, so calls that depend on nothing overlap and the chain is the data dependencies' depth; at 100 ms on
    # loaded cores, a check that got its CPU late starts its first call after another's ended and lengthens it.
    dependency_chain: int | None = None
    dependency_path: str = ""

    @property
    def rounds(self) -> float:
        return (self.wall_s - self.wall0_s) / self.delay_s

    @property
    def quota_floor(self) -> float:
        """The rounds (of the delay) AWS's request-rate quotas alone take for this run's calls (RATE_QUOTAS)."""
        return max((self.calls[op] / rate for op, rate in RATE_QUOTAS.items()), default=0.0) / self.delay_s


def commands(cluster: str, config: Path, url: str, node: str) -> dict[str, list[str]]:
    common = ["--config", str(config), "--endpoint-url", url, "--region", REGION]
    target = ["--cluster", cluster, *common]
    return {
        "check": ["check", *target, "--format", "json"],
        "check --only efa": ["check", *target, "--format", "json", "--only", "efa"],
        "why-not --to head --port 22": ["why-not", *target, "--from", node, "--to", "head", "--port", "22",
                                        "--format", "json"],
        "fleet check": ["fleet", "check", "--account-ids", ACCOUNT, "--regions", REGION, *common, "--format",
                        "json", "--no-progress"],
    }


def run_once(proxy: LatencyProxy, argv: list[str], workdir: Path, name: str) -> tuple[dict[str, Any], list[Call], str]:
    """The command in a measured child (bench/measured.py): its figures, the calls the proxy answered, its stdout."""
    proxy.recorder.take()
    facts_path, out, err = workdir / f"{name}.facts.json", workdir / f"{name}.out", workdir / f"{name}.err"
    facts_path.unlink(missing_ok=True)
    started = time.perf_counter()
    with out.open("w") as stdout, err.open("w") as stderr:
        subprocess.run([sys.executable, str(HERE / "measured.py"), str(facts_path), "check", *argv], stdout=stdout,
                       stderr=stderr, env=os.environ.copy(), check=False)
    if not facts_path.exists():
        raise RuntimeError(f"{name}: the measured child wrote no figures: {err.read_text()[-2000:]}")
    facts = json.loads(facts_path.read_text())
    facts["outer_wall_s"] = time.perf_counter() - started
    if facts["exit"] == 3:
        print(f"{name}: exit 3: {err.read_text()[-1500:]}", file=sys.stderr, flush=True)
    return facts, proxy.recorder.take(), out.read_text()


def findings_of(text: str) -> set[tuple[str, str]]:
    try:
        report = json.loads(text)
    except ValueError:
        return set()
    found = report.get("findings", [])
    for cluster in report.get("clusters", []):  # fleet reports nest each cluster's report
        found += (cluster.get("report") or {}).get("findings", [])
    return {(f["check"], f["resource"]) for f in found if isinstance(f, dict) and "check" in f}


def measure(proxy: LatencyProxy, name: str, argv: list[str], nodes: int, delay_s: float, workdir: Path,
            repeat: int, chain_delay_s: float = 0.0) -> Row:
    """``repeat`` runs at 0 ms and at the delay, the fastest of each kept (load only ever adds time); with
    ``chain_delay_s``, one more run at that delay for the dependency chain."""
    fast: dict[str, Any] | None = None
    slow: dict[str, Any] | None = None
    for _ in range(repeat):
        proxy.delay_s = 0.0
        facts, _, _ = run_once(proxy, argv, workdir, f"{name}-0")
        fast = facts if fast is None or facts["wall_s"] < fast["wall_s"] else fast
        proxy.delay_s = delay_s
        facts, got, text = run_once(proxy, argv, workdir, f"{name}-d")
        if slow is None or facts["wall_s"] < slow["wall_s"]:
            slow, calls, out = facts, got, text
    proxy.delay_s = 0.0
    assert fast is not None and slow is not None
    answered = [c for c in calls if not c.throttled]
    repeated: Counter[str] = Counter()
    distinct: Counter[str] = Counter()
    seen: set[str] = set()
    for c in answered:
        if c.digest in seen:
            repeated[c.op] += 1
        else:
            distinct[c.op] += 1
            seen.add(c.digest)
    row = Row(name, nodes, fast["wall_s"], slow["wall_s"], slow["cpu_s"], slow["peak_rss_mib"], slow["exit"],
              chain(answered), max_in_flight(answered), Counter(c.op for c in answered), distinct, dict(repeated),
              delay_s, path=chain_text(answered), findings=findings_of(out))
    if chain_delay_s > 0:
        proxy.delay_s = chain_delay_s
        try:
            _, long_calls, _ = run_once(proxy, argv, workdir, f"{name}-chain")
        finally:
            proxy.delay_s = 0.0
        long_answered = [c for c in long_calls if not c.throttled]
        row.dependency_chain, row.dependency_path = chain(long_answered), chain_text(long_answered)
    return row


def bound(base: Row, nodes: int) -> int:
    """The smallest size's distinct calls, the cluster-sized listings at their maximum page size."""
    total = 0
    for op, count in base.distinct.items():
        total += count - pages(op, base.nodes) + pages(op, nodes) if op in PAGED else count
    return total


def demo_rows(workdir: Path) -> list[tuple[str, float, float, int]]:
    rows = []
    for name, argv in (("check --demo", ["check", "--demo", "--format", "json"]),
                       ("ask --demo", ["ask", "--demo", "--no-progress", "what is wrong?"])):
        facts, _ = measured(["check", *argv], workdir, name.replace(" ", "_"))
        rows.append((name, facts["outer_wall_s"], facts["cpu_s"], facts["exit"]))
    return rows


def markdown(rows: list[Row], throttled: tuple[Row, Row] | None, demo: list[tuple[str, float, float, int]],
             delay_ms: int, quick: bool, chain_delay_ms: int = 0) -> str:
    long_chain = f" | chain at {chain_delay_ms:,} ms" if chain_delay_ms else ""
    lines = [f"| command | nodes | rounds ((wall at {delay_ms} ms - wall at 0) / {delay_ms} ms) | chain"
             f"{long_chain} | goal | quota floor (rounds) | wall at 0 / at delay s | CPU s | peak MiB | API calls "
             "(made / lower bound) | repeated | most in flight | exit |",
             "|---|---:|---:|---:|" + ("---:|" if chain_delay_ms else "") + "---:|" * 6 + "---|---:|---:|"]
    for r in rows:
        goal = GOALS.get(r.command)
        target = "-" if goal is None else f"<= {goal[0] if r.nodes <= 256 else goal[1]}"
        repeated = ", ".join(f"{op} {n}" for op, n in sorted(r.repeated.items())) or "none"
        size = f"{r.nodes:,}" if r.world == "p4d" else f"{r.nodes} ({r.world})"
        long_cell = f" | {'-' if r.dependency_chain is None else r.dependency_chain}" if chain_delay_ms else ""
        lines.append(f"| {r.command} | {size} | {r.rounds:.1f} | {r.chain}{long_cell} | {target} | "
                     f"{r.quota_floor:.1f} | {r.wall0_s:.1f} / "
                     f"{r.wall_s:.1f} | {r.cpu_s:.1f} | {r.peak_mib:.0f} | {sum(r.calls.values())} / {r.bound} | "
                     f"{repeated} | {r.in_flight} | {r.exit} |")
    if throttled:
        clean, slow = throttled
        lost = sorted(clean.findings - slow.findings)
        lines += ["", f"Throttled (`check`, {clean.nodes} nodes, a share of requests answered with the service's "
                  f"throttling error): {sum(slow.calls.values())} requests (throttled ones included), exit {slow.exit} "
                  f"(clean run {clean.exit}), findings {len(slow.findings)} (clean run {len(clean.findings)}), "
                  f"lost: {', '.join(map(str, lost)) or 'none'}; wall {slow.wall_s:.1f} s against "
                  f"{clean.wall0_s:.1f} s clean."]
    if demo:
        lines += ["", "| demo | wall s (with interpreter start-up) | CPU s | exit |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {wall:.2f} | {cpu:.2f} | {code} |" for name, wall, cpu, code in demo]
    lines += ["", "The chains (the calls one after another in the delayed run, in order):", ""]
    lines += [f"- {r.command}, {r.nodes:,} nodes{'' if r.world == 'p4d' else ' (' + r.world + ')'}: {r.path}"
              for r in rows]
    if chain_delay_ms:
        lines += ["", f"The dependency chains (the same, in the run at {chain_delay_ms:,} ms):", ""]
        lines += [f"- {r.command}, {r.nodes:,} nodes{'' if r.world == 'p4d' else ' (' + r.world + ')'}: "
                  f"{r.dependency_path}" for r in rows if r.dependency_chain is not None]
    lines += ["", f"1-minute load average at the end: {os.getloadavg()[0]:.1f} (2 shared cores). Rounds come from "
              "two wall times and carry their noise (a second of CPU contention is 10 rounds at 100 ms); 'chain' "
              "counts the calls the proxy saw one after another in the delayed run (at the long delay: the calls' "
              "data dependencies, independent calls overlapping there). The lower bound is the "
              "smallest size's distinct calls, cluster-sized listings (DescribeInstances 1,000 a page, ListMetrics "
              "500 a metric name, GetMetricData 500 queries, DescribeSpotInstanceRequests 200 ids) at their "
              "maximum page size: at the smallest size made equals bound unless a call was repeated. 'quota floor': "
              "the rounds CloudWatch's request-rate quotas alone take for the calls made (ListMetrics 25 a second, "
              "GetMetricData 500 a second, per account and Region: CloudWatch User Guide, 'CloudWatch service "
              "quotas'); a run cannot finish sooner on AWS at the default quotas, whatever its chain."]
    return "\n".join(lines) + ("\n\n_--quick run_\n" if quick else "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 nodes, check and why-not, nothing written")
    parser.add_argument("--full", action="store_true", help="64, 256 and 2,048 nodes")
    parser.add_argument("--sizes", help="comma-separated node counts (default 64,256)")
    parser.add_argument("--commands", help="comma-separated command names (default: all)")
    parser.add_argument("--delay-ms", type=int, default=100)
    parser.add_argument("--chain-delay-ms", type=int, default=1000,
                        help="one more run per command at this delay for the dependency chain (0: none)")
    parser.add_argument("--throttle", type=float, default=0.2, help="share of requests throttled (0: no such run)")
    parser.add_argument("--no-demo", action="store_true", help="neither the demo world's rounds nor the demo timings")
    parser.add_argument("--repeat", type=int, default=2, help="runs at each delay below 1,000 nodes, fastest kept")
    parser.add_argument("--results", type=Path)
    parser.add_argument("--notes", type=Path, help="a Markdown file of notes (how it was run) ending the section")
    args = parser.parse_args(argv)
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes else [8] if args.quick
             else [64, 256, 2048] if args.full else [64, 256])
    wanted = (args.commands.split(",") if args.commands else ["check", "why-not --to head --port 22"] if args.quick
              else None)
    results = args.results or (None if args.quick else RESULTS)
    isolate_environment()
    server = WorldServer(os.environ.copy())
    proxy = LatencyProxy(server.url)
    rows: list[Row] = []
    throttled: tuple[Row, Row] | None = None
    demo: list[tuple[str, float, float, int]] = []
    delay = args.delay_ms / 1000
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            worlds = [("p4d", n) for n in sizes] + ([] if args.no_demo or args.quick else [("demo", 0)])
            for kind, n in worlds:
                if kind == "demo":  # the demo's cluster seeded into the same server, measured through the proxy
                    server.ask(reset=True)
                    world = server.ask(world="demo")
                    cluster, n = world["cluster"], world["nodes"]
                else:
                    cluster = f"rounds-{n}"
                    world = server.seed("gpu", cluster, n)
                settings = dict(world["settings"], head_nodes=[world["node_ids"][0]])
                config = write_config(workdir, cluster, settings)
                for name, command in commands(cluster, config, proxy.url, world["node_ids"][1]).items():
                    if wanted and name not in wanted:
                        continue
                    started = time.perf_counter()
                    rows.append(measure(proxy, name, command, n, delay, workdir, args.repeat if n < 1000 else 1,
                                        0.0 if args.quick else args.chain_delay_ms / 1000))
                    r = rows[-1]
                    r.world = kind
                    print(f"{n} nodes ({kind}), {name}: {r.rounds:.1f} rounds (chain {r.chain}, at the long delay "
                          f"{r.dependency_chain}), CPU {r.cpu_s:.1f}s, "
                          f"{sum(r.calls.values())} calls, repeated {r.repeated or 'none'}: {r.path} "
                          f"({time.perf_counter() - started:.0f}s)", flush=True)
                if kind == "p4d" and n == sizes[0] and args.throttle > 0 and (not wanted or "check" in wanted):
                    clean = next(r for r in rows if r.command == "check" and r.nodes == n)
                    proxy.throttle_share = args.throttle
                    facts, calls, out = run_once(proxy, commands(cluster, config, proxy.url, "")["check"], workdir,
                                                 "throttled")
                    proxy.throttle_share = 0.0
                    answered = [c for c in calls if not c.throttled]
                    slow = Row("check (throttled)", n, facts["wall_s"], facts["wall_s"], facts["cpu_s"],
                               facts["peak_rss_mib"], facts["exit"], chain(answered), max_in_flight(answered),
                               Counter(c.op for c in calls), Counter(), {}, delay, findings=findings_of(out))
                    throttled = (clean, slow)
                    print(f"throttled: exit {slow.exit} (clean {clean.exit}), {len(slow.findings)} findings "
                          f"(clean {len(clean.findings)}), {sum(1 for c in calls if c.throttled)} throttled",
                          flush=True)
            if not args.no_demo and not args.quick:
                demo = demo_rows(workdir)
    finally:
        proxy.close()
        server.close()
    for r in rows:
        base = next(b for b in rows if b.command == r.command and b.world == r.world)
        r.bound = bound(base, r.nodes)
    table = markdown(rows, throttled, demo, args.delay_ms, args.quick, 0 if args.quick else args.chain_delay_ms)
    if args.notes:
        table = table.rstrip("\n") + "\n\n" + args.notes.read_text().strip() + "\n"
    print(table)
    if results:
        write_section(results, "rounds", "Sequential round trips per command (bench/rounds.py)", table)
    problems = []
    if throttled:
        clean, slow = throttled
        if not clean.findings <= slow.findings or slow.exit < clean.exit or slow.exit == 0:
            problems.append(f"throttled run: exit {slow.exit}, lost {sorted(clean.findings - slow.findings)}")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
