"""moto's ThreadedMotoServer in a process of its own, seeding bench worlds on request.

    python bench/world_server.py        # prints {"url": ...}, then answers one JSON request per stdin line

The benchmark's measured children are started by a parent that holds no moto: on Linux a child's peak RSS
(getrusage, wait4) starts from its parent's at fork, so moto's memory would be counted as the child's.
Requests: {"world": "gpu" | "p5", "cluster": name, "nodes": n} (or {"world": "demo"}: the demo's cluster) seeds
that world through the server's APIs
(bench/scale_world.py, bench/p5_world.py) and answers its description; {"reset": true} empties the server.
The process ends when stdin closes.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ itself, for its sibling modules

import boto3  # noqa: E402
from p5_world import seed_p5_world  # noqa: E402
from scale_world import REGION, seed_world  # noqa: E402


def start() -> tuple[object, str]:
    from moto.server import ThreadedMotoServer

    from fmdoctor.demo import moto_compat

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    moto_compat.install()  # the same fidelity patches as the demo
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def answer(url: str, request: dict) -> dict:
    if request.get("reset"):
        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=60).read()
        return {"reset": True}
    if request["world"] == "demo":
        return _demo()
    seed = {"gpu": seed_world, "p5": seed_p5_world}[request["world"]]
    world = seed(boto3.Session(region_name=REGION), request["cluster"], int(request["nodes"]), time.perf_counter)
    out = asdict(world)
    out["settings"] = world.settings()
    out["planted"] = sorted(getattr(world, "planted", ()))
    return out


def _demo() -> dict:
    """The demo's world (fmdoctor.demo.scenario.seed_demo) through this server's APIs: its AWS part only (the demo's
    Prometheus and Slurm view live in the demo's own process, so those sources read as not verified here)."""
    from fmdoctor.demo.scenario import seed_demo

    started = time.perf_counter()
    world = seed_demo(boto3.Session(region_name=REGION), moto_here=True)  # this process runs the server
    nodes = [n.id for n in world.launched_nodes().values()]
    return {"cluster": world.cluster, "settings": world.settings, "defaults": world.defaults, "node_ids": nodes,
            "nodes": len(nodes), "planted": [], "seed_s": {"demo": time.perf_counter() - started}}


def main() -> int:
    server, url = start()
    import os

    os.environ["AWS_ENDPOINT_URL"] = url  # the seeding clients talk to the server
    print(json.dumps({"url": url}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(answer(url, json.loads(line))), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
