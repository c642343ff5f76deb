"""``fmdoctor serve`` as it runs in production: the installed CLI as a subprocess, moto's SQS/EC2 server on
127.0.0.1 carrying real-shaped events, a loopback fake of Slack's Web API, a real Prometheus (Debian's
``prometheus`` package) scraping ``/metrics``, and an Alertmanager webhook payload posted to it.

Every assertion is on counts (posts, outcomes, messages left), never on how long something took.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Event
from typing import Any

import pytest

from fmdoctor.demo.scenario import DEMO_CLUSTER, seed_demo, seed_network_and_nodes
from fmdoctor.demo.seed_health import seed_spot
from fmdoctor.loopback import serve_in_background
from fmdoctor.slack.testing import BOT_TOKEN, CHANNEL, FakeSlack

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serve"
TOKEN = "e2e-serve-token-0123456789abcdef"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"waited {timeout}s for {what}")


class Serve:
    """One ``fmdoctor serve`` replica: a subprocess with its own log file."""

    def __init__(self, tmp: Path, name: str, argv: list[str], env: dict[str, str]):
        self.log = tmp / f"{name}.log"
        script = Path(sys.executable).with_name("fmdoctor")
        self.proc = subprocess.Popen([str(script), "-v", "serve", *argv], env=env, cwd=tmp, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.log.open("w"))
        self.port: int | None = None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> Serve:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"fmdoctor serve exited {self.proc.returncode}:\n{self.text()}")
            for line in self.text().splitlines():
                if line.startswith("fmdoctor serve: http://"):
                    self.port = int(line.split("http://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
                if line.startswith("fmdoctor serve: queue"):
                    return True
            return False

        wait_for(ready, 120, "fmdoctor serve to start")
        return self

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def metric(self, name: str, **labels: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as response:
            text = response.read().decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def stack(moto_server, fake_slack, tmp_path) -> Iterator[dict[str, Any]]:
    """The demo's nodes and Spot story on moto's server, an event queue with a dead-letter queue, the config."""
    session = moto_server.session()
    world = seed_demo(session, (seed_network_and_nodes, seed_spot))
    sqs = session.client("sqs")
    dlq = sqs.create_queue(QueueName="fmdoctor-events-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue = sqs.create_queue(QueueName="fmdoctor-events", Attributes={
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})})["QueueUrl"]
    config = tmp_path / "fmdoctor.yaml"
    config.write_text(json.dumps({
        "clusters": {DEMO_CLUSTER: world.settings},
        "serve": {"queue_url": queue, "slack_channel": CHANNEL, "concurrency": 3, "wait_time": 1,
                  "visibility_timeout": "10s", "shutdown_grace": "2s", "max_event_bytes": 65536, "port": 0},
    }))
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-west-2", "AWS_CONFIG_FILE": os.devnull,
           "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_EC2_METADATA_DISABLED": "true",
           "NO_PROXY": "127.0.0.1,localhost", "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": fake_slack.api_url,
           "FMDOCTOR_SERVE_TOKEN": TOKEN}
    replicas: list[Serve] = []

    def start(name: str = "serve", extra_env: dict[str, str] | None = None, endpoint: bool = True) -> Serve:
        argv = ["--config", str(config), "--region", "us-west-2"]
        argv += ["--endpoint-url", moto_server.url] if endpoint else []
        replica = Serve(tmp_path, name, argv, {**env, **(extra_env or {})})
        replicas.append(replica)
        return replica.wait_ready()

    yield {"world": world, "sqs": sqs, "queue": queue, "dlq": dlq, "start": start, "slack": fake_slack,
           "moto": moto_server, "tmp": tmp_path, "config": config}
    for replica in replicas:
        replica.stop()


def queue_depth(sqs: Any, url: str) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def spot_event(instance: str, event_id: str) -> str:
    data = json.loads((FIXTURES / "spot-interruption.json").read_text())
    data["id"], data["detail"]["instance-id"] = event_id, instance
    data["resources"] = [f"arn:aws:ec2:us-west-2a:instance/{instance}"]
    return json.dumps(data)


def alert(fingerprint: str, checks: str = "spot") -> dict[str, Any]:
    data = json.loads((FIXTURES / "alertmanager-webhook.json").read_text())
    for labels in (data["commonLabels"], data["alerts"][0]["labels"]):
        labels.update(cluster=DEMO_CLUSTER, fmdoctor_checks=checks)
    data["alerts"][0]["fingerprint"] = fingerprint
    return data


def channel_posts(slack: FakeSlack) -> list[dict[str, Any]]:
    """Top-level messages (a thread's replies and updates are not new posts)."""
    return [p for p in slack.of("chat.postMessage") if not p.get("thread_ts")]


@pytest.fixture
def prometheus(tmp_path) -> Iterator[Any]:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("the Prometheus binary is not installed (Debian package 'prometheus'; .ci/run installs it)")
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        config = tmp_path / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
                          f"  - job_name: fmdoctor-serve\n    static_configs: [{{targets: ['{target}']}}]\n")
        procs.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w")))
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


def query(prometheus_url: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())["data"]["result"]
    except (urllib.error.URLError, ConnectionError):
        return []


def test_events_in_results_out(stack, prometheus):
    world, sqs, queue, slack = stack["world"], stack["sqs"], stack["queue"], stack["slack"]
    serve = stack["start"]()
    interrupted = world.facts["spot"]["interrupted"]
    # The same EventBridge event delivered twice (at-least-once), and three bad ones.
    for body in (spot_event(interrupted, "spot-e2e-1"), spot_event(interrupted, "spot-e2e-1"), "{not json",
                 spot_event("i-0fffffffffffffff0", "spot-e2e-stranger"), json.dumps({"padding": "x" * 70000})):
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    # An Alertmanager webhook payload, as Alertmanager posts it.
    request = urllib.request.Request(serve.url("/webhook/alertmanager"), method="POST",
                                     data=json.dumps(alert("e2e-am-1")).encode(),
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200  # queued on SQS before it is answered
    wait_for(lambda: queue_depth(sqs, queue) == 0 and serve.metric("fmdoctor_serve_events_total") >= 6, 180,
             "every message handled")
    posts = channel_posts(slack)
    titles = sorted(p["text"] for p in posts)
    assert len(posts) == 2, titles  # one per event: the redelivered copy posted nothing
    assert any("Spot interruption warning" in t for t in titles) and any("GPUXidError" in t for t in titles)
    outcomes = {o: serve.metric("fmdoctor_serve_events_total", outcome=o)
                for o in ("delivered", "duplicate", "malformed", "unknown_cluster", "too_large")}
    assert outcomes == {"delivered": 2, "duplicate": 1, "malformed": 1, "unknown_cluster": 1, "too_large": 1}
    assert queue_depth(sqs, stack["dlq"]) == 0  # nothing lost to the dead-letter queue either
    log = serve.text()
    for outcome in ("malformed", "unknown_cluster", "too_large", "duplicate"):
        assert f": {outcome}" in log, outcome
    # A real Prometheus scrapes the last verdict per cluster and check.
    prometheus_url = prometheus(f"127.0.0.1:{serve.port}")
    result = wait_for(lambda: query(prometheus_url, f'fmdoctor_findings{{cluster="{DEMO_CLUSTER}",'
                                                    'check="spot-interruption",severity="critical"}'), 60,
                      "Prometheus to scrape fmdoctor serve")
    assert float(result[0]["value"][1]) >= 1
    [status] = query(prometheus_url, "fmdoctor_status")
    assert status["metric"]["cluster"] == DEMO_CLUSTER and status["value"][1] == "2"
    assert serve.stop() == 0  # SIGTERM: a clean exit


class StallingAws(ThreadingHTTPServer):
    """An AWS endpoint on 127.0.0.1 that takes requests and never answers: a replica calling it is stuck
    mid-investigation until it is killed."""

    daemon_threads = True

    def __init__(self) -> None:
        self.called = Event()
        self.release = Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                server.called.set()
                server.release.wait(120)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        serve_in_background(self)


def test_replica_killed_mid_investigation_is_handled_once_by_another(stack):
    sqs, queue, slack = stack["sqs"], stack["queue"], stack["slack"]
    stall = StallingAws()
    try:
        # Replica A reads the queue from moto but every other AWS call hangs: it dies mid-investigation.
        a = stack["start"]("replica-a", {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{stall.server_address[1]}",
                                         "AWS_ENDPOINT_URL_SQS": stack["moto"].url}, endpoint=False)
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(alert("e2e-kill-1")))
        assert stall.called.wait(120), a.text()
        a.proc.kill()  # SIGKILL: no shutdown, no release; the heartbeat just stops
        a.proc.wait()
        b = stack["start"]("replica-b")
        wait_for(lambda: b.metric("fmdoctor_serve_events_total", outcome="delivered") == 1, 180,
                 "replica B to deliver the event A was killed on")
        assert len(channel_posts(slack)) == 1
        assert "(receive 2)" in b.text() or "(receive 3)" in b.text()  # it came back after A's visibility ran out
        wait_for(lambda: queue_depth(sqs, queue) == 0, 60, "the message to be deleted")
    finally:
        stall.release.set()
        stall.shutdown()


def test_burst_of_500_events_all_handled_with_bounded_memory(stack):
    sqs, queue, slack = stack["sqs"], stack["queue"], stack["slack"]
    serve = stack["start"]()
    for start in range(0, 500, 10):
        entries = [{"Id": str(i), "MessageBody": json.dumps(alert(f"burst-{i:03d}"))} for i in range(start, start + 10)]
        sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    wait_for(lambda: serve.metric("fmdoctor_serve_events_total", outcome="delivered") >= 500, 900,
             "500 events delivered")
    wait_for(lambda: queue_depth(sqs, queue) == 0, 60, "the queue to drain")
    # Each posted once. Under load a message may come back while its first copy is still being handled
    # (at-least-once): that copy is only ever counted as in_progress or duplicate, never posted again.
    total = serve.metric("fmdoctor_serve_events_total")
    assert total - 500 == sum(serve.metric("fmdoctor_serve_events_total", outcome=o)
                              for o in ("in_progress", "duplicate"))
    assert len(channel_posts(slack)) == 500
    assert serve.metric("fmdoctor_serve_in_flight_max") <= 3  # serve.concurrency
    peak_kib = int(next(line.split()[1] for line in Path(f"/proc/{serve.proc.pid}/status").read_text().splitlines()
                        if line.startswith("VmHWM:")))
    assert peak_kib < 700 * 1024, f"peak resident memory {peak_kib} KiB"


def test_two_replicas_on_one_queue_post_each_event_once(stack):
    """serve.dedupe_table shared by replicas: an event delivered again to another replica (a replica that posted
    and was replaced, EventBridge's second copy) is acknowledged there without a second post; and with two
    replicas running, copies of each event that land on both are posted once."""
    from fmdoctor.serve.dedupe import create_table

    sqs, queue, slack = stack["sqs"], stack["queue"], stack["slack"]
    create_table(stack["moto"].session().client("dynamodb"), "fmdoctor-serve-dedupe")
    config = json.loads(stack["config"].read_text())
    config["serve"]["dedupe_table"] = "fmdoctor-serve-dedupe"
    stack["config"].write_text(json.dumps(config))

    def send(names: list[str]) -> None:
        for start in range(0, len(names), 10):
            sqs.send_message_batch(QueueUrl=queue, Entries=[{"Id": str(n), "MessageBody": json.dumps(alert(name))}
                                                            for n, name in enumerate(names[start:start + 10])])

    def outcome(replicas: list[Serve], name: str) -> float:
        return sum(r.metric("fmdoctor_serve_events_total", outcome=name) for r in replicas)

    # Replica A delivers four events and is replaced by B; the same four events come again, to B.
    a = stack["start"]("replica-a")
    assert "deliveries remembered in DynamoDB table fmdoctor-serve-dedupe" in a.text()
    first = [f"again-{i}" for i in range(4)]
    send(first)
    wait_for(lambda: outcome([a], "delivered") == 4 and queue_depth(sqs, queue) == 0, 180, "A to deliver")
    assert a.stop() == 0
    b = stack["start"]("replica-b")
    send(first)
    wait_for(lambda: outcome([b], "duplicate") == 4 and queue_depth(sqs, queue) == 0, 180, "B to acknowledge")
    assert outcome([b], "delivered") == 0 and len(channel_posts(slack)) == 4
    # Two replicas at once, every event twice.
    c = stack["start"]("replica-c")
    both = [f"twice-{i}" for i in range(6)]
    send(both + both)
    wait_for(lambda: outcome([b, c], "delivered") >= 6 and queue_depth(sqs, queue) == 0, 300, "every copy handled")
    assert outcome([b, c], "delivered") == 6 and len(channel_posts(slack)) == 10
    assert outcome([b, c], "duplicate") == 4 + 6  # each second copy, after in_progress if the two overlapped
    assert queue_depth(sqs, stack["dlq"]) == 0


def test_sigterm_does_not_wait_for_the_long_poll(stack):
    """Issue 35 item 11: with serve.wait_time 20 s and an empty queue, SIGTERM ends the replica at once."""
    config = json.loads(stack["config"].read_text())
    config["serve"]["wait_time"] = 20
    stack["config"].write_text(json.dumps(config))
    serve = stack["start"]()
    time.sleep(2)  # the first long poll is pending
    signalled = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    assert serve.proc.wait(timeout=60) == 0
    assert time.monotonic() - signalled < 10, serve.text()  # not the 18 s left of the poll
