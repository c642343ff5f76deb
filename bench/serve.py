"""Benchmark: a burst of EVENTS alerts through ``fmdoctor serve``'s SQS consumer, p99 time from event to post.

    python bench/serve.py            # 500 events, concurrency 4, then a baseline at concurrency 1
    python bench/serve.py --quick    # 40 events, a CI smoke test

Everything runs in one process: moto (in-process) holds the demo cluster's nodes and Spot story and the
event queue; a loopback fake of Slack's Web API takes the posts and stamps when each arrived. Each event is an
Alertmanager alert (one per SQS message, as the webhook forwards them) for the demo cluster, scoped to the
Spot checks. The time of an event is from its SendMessage to its summary post in Slack. Reported against the
same burst at concurrency 1 from the same run (a ratio, not a number to compare across machines), with CPU
time next to wall time and the Doctor runs made against their lower bound (one per ``serve.reuse_report``
window). The process exits non-zero unless every event was posted exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from results_file import write_section  # noqa: E402

from fmdoctor.config import ServeSettings, Settings  # noqa: E402
from fmdoctor.demo.runtime import mocked_aws  # noqa: E402
from fmdoctor.demo.scenario import DemoWorld, seed_network_and_nodes  # noqa: E402
from fmdoctor.demo.seed_health import seed_spot  # noqa: E402
from fmdoctor.engine.api import Connection, Doctor  # noqa: E402
from fmdoctor.loopback import serve_in_background  # noqa: E402
from fmdoctor.serve.outputs import SlackOutput, redactor  # noqa: E402
from fmdoctor.serve.queue import SqsConsumer  # noqa: E402
from fmdoctor.serve.service import Service  # noqa: E402
from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL, FakeSlack  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "serve" / "alertmanager-webhook.json"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


class StampingSlack(FakeSlack):
    """The fake Web API, noting when each channel post (not a thread reply) arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.posted_at: dict[str, float] = {}

    def record(self, method: str, params: dict[str, Any], reply: dict[str, Any] | None = None) -> None:
        if method == "chat.postMessage" and not params.get("thread_ts"):
            self.posted_at.setdefault(str(params.get("text")), time.monotonic())
        super().record(method, params, reply)


def alert(cluster: str, i: int, run: str) -> tuple[str, str]:
    data = json.loads(FIXTURE.read_text())
    name = f"bench-{run}-{i:04d}"
    for labels in (data["commonLabels"], data["alerts"][0]["labels"]):
        labels.update(alertname=name, cluster=cluster, fmdoctor_checks="spot")
    data["alerts"][0]["fingerprint"] = name
    return json.dumps(data), name


def burst(world: DemoWorld, events: int, concurrency: int, run: str) -> dict[str, Any]:
    from slack_sdk import WebClient

    slack = StampingSlack()
    serve_in_background(slack)
    settings = Settings.model_validate({"region": world.region, "clusters": {world.cluster: world.settings}})
    doctor = Doctor(settings=settings, connection=Connection(region=world.region))
    sqs = world.session.client("sqs", region_name=world.region)
    queue = sqs.create_queue(QueueName=f"fmdoctor-bench-{run}")["QueueUrl"]
    serve = ServeSettings(queue_url=queue, concurrency=concurrency, wait_time=1)
    output = SlackOutput(WebClient(token=BOT_TOKEN, base_url=slack.api_url), CHANNEL, redactor())
    service = Service(doctor, serve, [output])
    consumer = SqsConsumer(sqs, queue, service.processor, concurrency, 120, 1, 5)
    sent: dict[str, float] = {}
    cpu0, wall0 = time.process_time(), time.monotonic()
    worker = threading.Thread(target=consumer.run, daemon=True)
    worker.start()
    for start in range(0, events, 10):
        entries = []
        for i in range(start, min(events, start + 10)):
            body, name = alert(world.cluster, i, run)
            entries.append({"Id": str(i), "MessageBody": body})
            sent[name] = time.monotonic()
        sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    deadline = time.monotonic() + 1800
    while len(slack.posted_at) < events and time.monotonic() < deadline:
        time.sleep(0.1)
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    consumer.stop.set()
    worker.join(timeout=30)
    slack.shutdown()
    latencies = sorted(at - sent[name] for text, at in slack.posted_at.items()
                       for name in [text.split(" alert ", 1)[1].split(" is ", 1)[0]] if name in sent)
    posts = len([c for c in slack.calls if c.method == "chat.postMessage" and not c.params.get("thread_ts")])
    return {"run": run, "events": events, "concurrency": concurrency, "posted": len(latencies), "posts": posts,
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "events_per_s": round(events / wall, 1),
            "p50_s": round(_pct(latencies, 50), 2), "p99_s": round(_pct(latencies, 99), 2),
            "doctor_runs": service.investigator.runs, "doctor_runs_bound": max(1, int(wall // 60) + 1),
            "outcomes": dict(service.metrics.events), "in_flight_max": service.metrics.in_flight_max}


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(pct / 100 * (len(values) - 1))))]


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| run | events | concurrency | wall s | CPU s | events/s | p50 event→post s | p99 event→post s | "
            "Doctor runs (bound) | most in flight |\n|---|---|---|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r['run']} | {r['events']} | {r['concurrency']} | {r['wall_s']} | {r['cpu_s']} | {r['events_per_s']} | "
        f"{r['p50_s']} | {r['p99_s']} | {r['doctor_runs']} ({r['doctor_runs_bound']}) | {r['in_flight_max']} |\n"
        for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="40 events; no RESULTS.md update")
    parser.add_argument("--json", type=Path, help="write the rows here as JSON")
    args = parser.parse_args(argv)
    events = 40 if args.quick else args.events
    with mocked_aws() as session:
        world = DemoWorld(session=session)
        world.settings["region"] = world.region
        seed_network_and_nodes(world)
        seed_spot(world)
        rows = [burst(world, events, args.concurrency, "burst"), burst(world, events, 1, "baseline")]
    text = table(rows)
    ratio = rows[1]["wall_s"] / rows[0]["wall_s"] if rows[0]["wall_s"] else float("nan")
    text += (f"\nThroughput at concurrency {args.concurrency} is {ratio:.2f}x the baseline's; every event posted "
             f"once in both runs. Load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
             "(CPU time far below wall time means the process waited for a CPU).\n")
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    ok = all(r["posted"] == r["events"] == r["posts"] for r in rows)
    if not args.quick and ok:
        write_section(RESULTS, "serve", "fmdoctor serve: a burst of alerts, event to Slack post", text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
