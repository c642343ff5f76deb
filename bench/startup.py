"""Benchmark: how long fmdoctor takes to start, and to seed and answer from its embedded demo.

    python bench/startup.py            # 3 runs of each; writes bench/RESULTS.md (startup) and bench/startup.json
    python bench/startup.py --quick    # 1 run of --version and checks list, no file written
    python bench/startup.py --baseline DIR   # also the demo commands of another checkout, run in turns with these

Each command runs as a user runs it: the installed ``fmdoctor`` script in a child process, its output thrown
away. CPU time is the child's user + system time as ``wait4`` reports it (its own and that of the children it
waited for, e.g. the demo's Prometheus); wall time is from start to exit. ``mcp --demo`` is driven over stdio
as an MCP client drives it: one ``initialize`` request (timed to its answer; CPU read from /proc at that moment),
then one ``list_checks`` call, which waits for the demo world. Every command runs once first, unmeasured, and
the children run without PYTHONDONTWRITEBYTECODE, so Python's compiled modules exist, as in an installed
package. Reported: min and median of the runs, and the 1-minute load average while they ran (the development
machine has 2 shared cores; CPU time is the steadier figure there).

``--baseline DIR`` runs the demo commands of another source tree too (``git archive BASE | tar -x -C DIR``: its
``fmdoctor`` package and ``checks`` come first on PYTHONPATH, with this venv's libraries), each of its runs
right before the same run of this tree, so both meet the same load on a shared machine; the section then has
a before/after table as well (kept in bench/startup.json under ``baseline``).

bench/startup.json keeps the figures a test reads back (tests/unit/test_startup.py fails when ``--version`` or
``checks list`` costs more than twice the recorded CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from results_file import write_section  # noqa: E402

FMDOCTOR = str(Path(sys.executable).with_name("fmdoctor"))
QUESTION = "why is training slow?"
# name, argv after fmdoctor, the goal (CPU s), what the goal is about
COMMANDS: list[tuple[str, list[str], float | None]] = [
    ("--version", ["--version"], 0.3),
    ("checks list", ["checks", "list"], 0.3),
    ("runbook show", ["runbook", "show", "efa-sg-self-reference"], None),
    ("check --demo", ["check", "--demo", "--no-progress"], 3.0),
    ("ask --demo", ["ask", "--demo", QUESTION, "--no-progress"], 4.0),
]
QUICK = ("--version", "checks list")
# Issue 39's goals, in wall time on a quiet machine (issue 26's above are CPU).
WALL_GOALS = {"check --demo": 2.0, "ask --demo": 2.0}
DEMO_COMMANDS = ("check --demo", "ask --demo")
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "bench-startup", "version": "0"}}}


def child_env(source: str | None = None) -> dict[str, str]:
    """The children's environment; ``source``: another source tree whose packages come first (--baseline)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    env["FMDOCTOR_MODEL"] = ""  # the offline planner for ask
    if source:
        env["PYTHONPATH"] = source
    return env


def run_once(argv: list[str], source: str | None = None) -> dict[str, float]:
    """One child run: its CPU (user + system, with the children it reaped) and wall time."""
    start = time.monotonic()
    proc = subprocess.Popen([FMDOCTOR, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=child_env(source))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1, 2):  # check's exit status is the verdict; 3 means it could not run
        raise SystemExit(f"fmdoctor {' '.join(argv)} exited {proc.returncode}")
    return {"cpu": usage.ru_utime + usage.ru_stime, "wall": wall}


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def run_mcp_once(source: str | None = None) -> dict[str, float]:
    """``fmdoctor mcp --demo`` over stdio: initialize (wall, CPU so far), then the first tool's answer."""
    start = time.monotonic()
    proc = subprocess.Popen([FMDOCTOR, "mcp", "--demo"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=child_env(source))
    assert proc.stdin is not None and proc.stdout is not None

    def ask(message: dict[str, Any]) -> dict[str, Any]:
        proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        while True:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise SystemExit("fmdoctor mcp --demo closed stdout")
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                return answer

    try:
        assert "result" in ask(INITIALIZE)
        init_wall, init_cpu = time.monotonic() - start, _proc_cpu(proc.pid)
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        answer = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "list_checks", "arguments": {}}})
        assert "result" in answer and not answer["result"].get("isError"), answer
        tool_wall, tool_cpu = time.monotonic() - start, _proc_cpu(proc.pid)
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)
    return {"cpu": init_cpu, "wall": init_wall, "tool_cpu": tool_cpu, "tool_wall": tool_wall}


def measure(name: str, run: Any, repeat: int) -> dict[str, Any]:
    run()  # unmeasured: compiled modules written, files in the page cache
    runs, loads = [], []
    for _ in range(repeat):
        runs.append(run())
        loads.append(os.getloadavg()[0])
    row: dict[str, Any] = {"command": name, "runs": len(runs), "load": round(statistics.mean(loads), 1)}
    for key in runs[0]:
        values = [r[key] for r in runs]
        row[f"{key}_min"], row[f"{key}_median"] = round(min(values), 3), round(statistics.median(values), 3)
    sys.stderr.write(f"{name}: {row}\n")
    return row


def table(rows: list[dict[str, Any]], goals: dict[str, float | None]) -> str:
    lines = ["| command | CPU s min / median | wall s min / median | goal | load (1 min) |",
             "|---|---:|---:|---|---:|"]
    for row in rows:
        goal = goals.get(row["command"])
        goal_text = "" if goal is None else f"≤ {goal:g} s CPU " + ("met" if row["cpu_min"] <= goal else "not met")
        wall_goal = WALL_GOALS.get(row["command"])
        if wall_goal is not None:
            goal_text += f"; ≤ {wall_goal:g} s wall " + ("met" if row["wall_min"] <= wall_goal else "not met")
        if row["command"] == "mcp --demo initialize":
            goal_text = "answered < 2 s " + ("met" if row["wall_min"] < 2 else "not met") + " (wall)"
        lines.append(f"| `{row['command']}` | {row['cpu_min']:.2f} / {row['cpu_median']:.2f} | "
                     f"{row['wall_min']:.2f} / {row['wall_median']:.2f} | {goal_text} | {row['load']} |")
        if "tool_cpu_min" in row:
            lines.append(f"| `mcp --demo` first tool (waits for the world) | {row['tool_cpu_min']:.2f} / "
                         f"{row['tool_cpu_median']:.2f} | {row['tool_wall_min']:.2f} / {row['tool_wall_median']:.2f}"
                         f" |  | {row['load']} |")
    return "\n".join(lines) + "\n"


def compare(baseline: str, repeat: int) -> list[dict[str, Any]]:
    """The demo commands of ``baseline`` and of this tree, each baseline run right before this tree's."""
    runs: dict[str, Any] = {name: command for name, command, _ in COMMANDS if name in DEMO_COMMANDS}
    runs["mcp --demo first tool"] = None
    rows = []
    for name, command in runs.items():
        def one(source: str | None, command: list[str] | None = command) -> dict[str, float]:
            if command is None:  # the MCP server: its first tool's answer, which waits for the world
                done = run_mcp_once(source)
                return {"cpu": done["tool_cpu"], "wall": done["tool_wall"]}
            return run_once(command, source)

        one(baseline), one(None)  # unmeasured: compiled modules written, files in the page cache
        before, after, loads = [], [], []
        for _ in range(repeat):
            before.append(one(baseline))
            after.append(one(None))
            loads.append(os.getloadavg()[0])
        row: dict[str, Any] = {"command": name, "runs": repeat, "load": round(statistics.mean(loads), 1)}
        for label, measured in (("before", before), ("after", after)):
            for key in ("cpu", "wall"):
                values = [r[key] for r in measured]
                row[f"{label}_{key}_min"] = round(min(values), 3)
                row[f"{label}_{key}_median"] = round(statistics.median(values), 3)
        sys.stderr.write(f"{name}: {row}\n")
        rows.append(row)
    return rows


def compare_table(rows: list[dict[str, Any]], baseline: str) -> str:
    lines = [f"Before ({baseline}) and after (this tree), in turns in one run, min / median s of "
             f"{rows[0]['runs']} runs each:", "",
             "| command | CPU before | CPU after | wall before | wall after | load (1 min) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| `{r['command']}` | {r['before_cpu_min']:.2f} / {r['before_cpu_median']:.2f} | "
                     f"{r['after_cpu_min']:.2f} / {r['after_cpu_median']:.2f} | {r['before_wall_min']:.2f} / "
                     f"{r['before_wall_median']:.2f} | {r['after_wall_min']:.2f} / {r['after_wall_median']:.2f} | "
                     f"{r['load']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 run of --version and checks list; no file written")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="also write the rows here")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run the demo commands from this source tree (the commit before), in turns")
    parser.add_argument("--baseline-name", default=None, help="how the section names the baseline (a commit)")
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: rewrite the RESULTS.md section from bench/startup.json")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    baseline: dict[str, Any] | None = None
    if args.render:
        recorded = json.loads((HERE / "startup.json").read_text())
        baseline = recorded.pop("baseline", None)
        rows = list(recorded.values())
    else:
        rows = [measure("python -c pass", lambda: _python_pass(), repeat)]
        for name, command, _ in COMMANDS:
            if args.quick and name not in QUICK:
                continue
            rows.append(measure(name, lambda command=command: run_once(command), repeat))
        if not args.quick:
            rows.append(measure("mcp --demo initialize", run_mcp_once, repeat))
        if args.baseline and not args.quick:
            baseline = {"name": args.baseline_name or args.baseline, "rows": compare(args.baseline, repeat)}
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    goals = {name: goal for name, _, goal in COMMANDS}
    text = table(rows, goals)
    if baseline:
        text += "\n" + compare_table(baseline["rows"], baseline["name"])
    sys.stdout.write(text)
    if not args.quick:
        recorded = {r["command"]: r for r in rows}
        if baseline:
            recorded["baseline"] = baseline
        (HERE / "startup.json").write_text(json.dumps(recorded, indent=2) + "\n")
        write_section(HERE / "RESULTS.md", "startup", "Start-up and the demo (bench/startup.py)",
                      text + "\n" + NOTES)
    return 0


def _python_pass() -> dict[str, float]:
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", "pass"], env=child_env())
    _, _, usage = os.wait4(proc.pid, 0)
    return {"cpu": usage.ru_utime + usage.ru_stime, "wall": time.monotonic() - start}


NOTES = """\
Earlier (2026-12-04, at a time when this machine ran everything slower: `python -c pass` took 0.04 s): the
console script collects the youngest generation every 20,000 allocations instead of CPython's 700
(`fmdoctor/cli/main.py`), and the demo's seeders take each node's interfaces from its RunInstances answer
instead of describing 32-interface instances again. Both versions run back to back, min / median CPU s of 3
runs: `check --demo` 5.83 / 5.95 before, 4.07 / 4.16 after; `ask --demo` 6.60 / 6.86 before, 5.64 / 6.31
after; `mcp --demo` first tool 4.16 / 4.56 before, 2.69 / 3.12 after. Counted with `gc.callbacks`, the
collector's own time in one `check --demo` fell from about 1.15 s to 0.27 s: at 700, each run made eight full
collections, each walking botocore's parsed models (EC2's was over 100,000 OrderedDicts) and moto's catalogues.

Before (main at b3a996b, in the same session with /usr/bin/time, 2-3 runs at a load of about 4, with
PYTHONDONTWRITEBYTECODE set): `--version` 0.7-0.9 s CPU, `check --demo` 7.6-8.7 s CPU. The issue's own
figures, from before that: `checks list` 1.2-1.4 s, `check --demo` 9-10 s, `ask --demo` 12-15 s, `mcp --demo`
answering `initialize` after 22-27 s.

Where the time goes (profiled with cProfile and `python -X importtime` on the same machine), and what is left
of the gap to the goals of issue 26:

- `--version`, `checks list`: registering the commands imports no command's world (engine, settings models,
  pydantic, boto3, the checks: a test keeps LangChain, Textual, slack-bolt, MCP, moto, boto3 and botocore out),
  and `checks list` reads `fmdoctor/cli/checks_catalogue.json`, generated from the registry. Over a bare
  interpreter remain the editable install's import hook, argparse and the command modules. Before: about 0.6 s.
- `runbook show`: the runbook library, pydantic, Jinja and the settings models (`fmdoctor.config` builds its
  pydantic models at import, about 0.1 s; deferring that build only moved the cost to the first load). It no
  longer imports boto3.
- `check --demo` (goals: 3 s CPU, issue 26; 2 s wall on a quiet machine, issue 39). Issue 39's second round (the
  table above compares its base, dcd052f, in turns with this tree): when moto runs in the process, the demo's
  checkpoint objects (44 PutObject) go to moto's S3 backend as its PutObject handler stores them
  (`fmdoctor/demo/moto_s3.py`), and its nodes (7 RunInstances, five of them 32-interface p5s) to moto's
  RunInstances handler with the parameters moto's parser makes of a client's request
  (`fmdoctor/demo/moto_ec2.py`: the fidelity wrappers on that handler still run). Seeding, by
  `time.process_time` in the process at a load of about 5: 0.77-0.81 s before, 0.60-0.62 s after (the nodes 0.25
  to 0.155 s, the checkpoints 0.155 to 0.075 s; 108 requests left of 157). tests/unit/test_demo_seeding.py
  compares what EC2's and S3's APIs answer for both routes (DescribeInstances, DescribeNetworkInterfaces,
  groups, subnets, placement groups, Spot requests, Capacity Reservations; ListObjectsV2, HeadObject, ACLs,
  tags, bodies and every field moto stores), and shows that losing any launch argument or stored field fails it.
  Issue 39's first round (its table is in git history: 06043af to a008fcb, 3.68 to 2.75 s CPU): the demo's
  CloudWatch datapoints go straight into moto's CloudWatch backend, about 0.25 s; one moto model loader;
  botocore's models read as plain dicts (EC2's model: 0.14 s to 0.07 s, read twice); promtool's backfill of the
  HyperPod history runs on the other core while the rest is seeded; the Kubernetes view lists nodes and pods
  without importing CoreV1Api (0.23 s). Where the CPU goes now (by phase, `time.process_time` in the process;
  seeding measured in this round, the other phases as the first round measured them, about 2.2 s in all):
  interpreter, CLI and the demo's modules (boto3, the engine) 0.3 s; the checks 0.2 s; moto with its EC2 models
  (the instance-type offerings of every region, 92 JSON files, and the region tables) and the fidelity patches
  0.35 s; seeding 0.6 s (108 requests through moto's request path; the first call of each service reads
  its model in the clients' loader and again in moto's and builds moto's backend and router;
  SageMaker's, Application Auto Scaling's and EC2's small calls are most of the rest); the run 0.7 s (79 calls
  answered by moto, about half of it, GetMetricData and ListMetrics the largest; the Kubernetes client's
  pydantic models about 0.15 s); teardown 0.07 s; Prometheus and promtool about 0.2 s in their own processes,
  beside the seeding. The wall time follows that CPU when a core is free; on this shared 2-core machine (loads
  of 5-8) the walls above are 1-2 s over it, so the 2 s goal is not met: about 0.2-0.3 s of CPU is left to take
  on a quiet machine, in the run's own calls (moto's answers to GetMetricData and ListMetrics) and the
  first-call costs of each service, which the run would pay if seeding did not. moto's EC2 import and the
  Kubernetes models are the cost of the real components.
- `ask --demo` (goals: 4 s CPU, issue 26; 2 s wall, issue 39): the demo above, plus LangChain and the assistant
  (about 1 s of imports, most of it langchain_core's tracers importing langsmith's run trees and types: not met
  while the assistant imports LangChain before the demo world exists). The target
  is confirmed before the question with one small DescribeInstances per tag key (at most 5 instances), no
  longer the whole inventory the checks then read again.
- `mcp --demo` (goal: `initialize` answered in under 2 s): the transport starts before the demo world is seeded
  (in a thread, after the server is built), so `initialize` waits only for imports: the MCP SDK and the
  server's tools (the engine and remediation with its runbooks and Jinja; the network analysis and LangChain
  come at the first call of a tool that needs them). That is about 1 s of CPU: under 2 s of wall time at the
  load above (at a load average of 6-8 on these 2 cores it was 2.2-2.8 s), far inside the MCP Inspector's 15 s.
  The first tool call waits for the world. The MCP Inspector's CLI (`npx @modelcontextprotocol/inspector --cli
  fmdoctor mcp --demo --method tools/list`, and `--method tools/call --tool-name check`) connected and answered
  with its default timeout on 2026-12-04: 16 s for the whole command including npx's download, 5.4 s once
  cached. Left to try: fmdoctor.remediation importing
  its modules at first use (its `preflight` function shares its name with a submodule, which a lazy package
  must keep from being shadowed).
"""

if __name__ == "__main__":
    sys.exit(main())
