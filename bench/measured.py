"""A measured child of bench/check_scale.py: runs one thing, then writes its own CPU time and peak memory.

    python bench/measured.py OUT.json check ARGS...                 # fmdoctor ARGS (the CLI, in this process)
    python bench/measured.py OUT.json inventory CONFIG CLUSTER URL   # only the inventory a check run fetches

Peak memory is VmHWM from /proc/self/status, the high-water mark of this process's own address space since
exec: getrusage and wait4 report the larger of that and the parent's at fork, which counted the benchmark's
moto server as fmdoctor's. Both figures are taken twice, after the imports and at the end, so the report
can say where they go.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _inventory(config: str, cluster: str, endpoint_url: str) -> tuple[int, dict]:
    from fmdoctor.config import load_settings
    from fmdoctor.engine.api import Connection, Doctor
    from fmdoctor.engine.inventory import INSTANCES

    doctor = Doctor(settings=load_settings(config), connection=Connection(endpoint_url=endpoint_url))
    mark = (_cpu(), _status_kib("VmRSS"))
    aws = doctor.connect(doctor.cluster_settings(cluster))
    inventory = doctor.inventory(cluster, aws, parts={INSTANCES})
    return 0, {"mark": mark, "api_calls": aws.calls.snapshot(), "instances": len(inventory.instances),
               "interfaces": len(inventory.interfaces)}


def _check(argv: list[str]) -> tuple[int, dict]:
    from fmdoctor.cli.main import collect_garbage_less_often, main

    mark = (_cpu(), _status_kib("VmRSS"))
    collect_garbage_less_often()  # as the fmdoctor console script (cli.main.run) does before main
    return main(argv), {"mark": mark}


def main() -> None:
    out, mode, *rest = sys.argv[1:]
    started = time.perf_counter()
    code, facts = _inventory(*rest) if mode == "inventory" else _check(rest)
    (import_cpu, import_rss) = facts.pop("mark")
    facts.update(exit=code, wall_s=time.perf_counter() - started, cpu_s=_cpu(), import_cpu_s=import_cpu,
                 import_rss_mib=import_rss / 1024, peak_rss_mib=_status_kib("VmHWM") / 1024)
    Path(out).write_text(json.dumps(facts))
    sys.stdout.flush()
    os._exit(code)  # like the fmdoctor console script: no tear-down of every object


if __name__ == "__main__":
    main()
