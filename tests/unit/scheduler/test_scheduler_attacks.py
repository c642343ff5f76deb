"""Attacks on the scheduler readers that the other modules do not already cover: a slurmrestd that redirects
the JWT elsewhere, and a scheduler node name two instances claim."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fmdoctor.scheduler import slurm
from fmdoctor.scheduler.model import SchedulerNode, SchedulerUnavailable, SchedulerView
from fmdoctor.scheduler.source import map_view

from .worlds import instance, inventory


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_slurmrestd_redirect_never_carries_the_jwt_to_the_other_host():
    seen: list[dict[str, str]] = []

    class Thief(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"paths": {"/slurm/v0.0.38/nodes": {}}, "nodes": [{"name": "x", "state": "idle"}]}')

        def log_message(self, *args):
            pass

    thief = _serve(Thief)

    class Redirecting(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(307)  # keeps method and, in clients that follow it, the headers
            self.send_header("Location", f"http://127.0.0.1:{thief.server_address[1]}{self.path}")
            self.end_headers()

        def log_message(self, *args):
            pass

    rest = _serve(Redirecting)
    try:
        with pytest.raises(SchedulerUnavailable) as raised:
            slurm.RestSlurm(f"http://127.0.0.1:{rest.server_address[1]}", "secret.jwt.value", "root").read()
    finally:
        rest.shutdown()
        thief.shutdown()
    assert seen == []  # nothing reached the other origin, the token least of all
    assert raised.value.code == "SlurmrestdFailed" and "307" in raised.value.message


def test_a_slurm_node_two_instances_claim_maps_to_neither():
    """Its name says 10.0.1.11 (ip-10-0-1-11), its NodeAddr says 10.0.1.12: no drain may pick one."""
    world = inventory(instance("i-0000000000000a011", "10.0.1.11"), instance("i-0000000000000a012", "10.0.1.12"))
    node = SchedulerNode("ip-10-0-1-11", frozenset({"IDLE"}), addresses=("10.0.1.12",))
    view = SchedulerView("slurm", "test", (node,))
    found = map_view(view, world)
    assert found.instance_of == {} and found.unmapped == ("ip-10-0-1-11",)
    assert found.nodes_of("i-0000000000000a011") == [] and found.nodes_of("i-0000000000000a012") == []


def test_slurm_named_but_not_readable_is_never_a_pass(tmp_path, monkeypatch):
    """scheduler.kind slurm with (1) no sinfo on PATH, (2) a slurm.conf whose slurmctld does not answer: Slurm
    22.05's sinfo --json then exits 0 with ``errors: [{"error": "Unspecified error", "errno": -1}]`` and an
    empty node list (run here against a port nothing listens on). Both are not verified, never healthy."""
    from fmdoctor.engine.model import Status

    from .worlds import run

    world = inventory(instance("i-0000000000000a011", "10.0.1.11"))
    ids = ["scheduler-node-down", "scheduler-node-held-out"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo
    report = run(world, ids, scheduler={"kind": "slurm"})
    assert report.findings == [] and report.status is Status.UNKNOWN
    assert {e.code for e in report.errors} == {"SlurmNotFound"}

    import shutil

    if shutil.which("sinfo", path="/usr/bin:/usr/local/bin") is None:
        pytest.skip("Slurm's client is not installed")
    monkeypatch.setenv("PATH", "/usr/bin:/usr/local/bin:/bin")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=1\nMessageTimeout=1\n"
                    "NodeName=n1\nPartitionName=p Nodes=n1\n", encoding="utf-8")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    report = run(world, ids, scheduler={"kind": "slurm"})
    assert report.findings == [] and report.status is Status.UNKNOWN
    assert {e.code for e in report.errors} == {"SlurmCommandFailed"}
    assert all("Unspecified error" in e.message for e in report.errors)


@pytest.mark.parametrize(("flags", "held_out"), [
    (["DRAIN"], True),                         # drained by hand long ago, idle, instance running: the heuristic
    (["DRAIN", "MAINTENANCE"], False),         # in a MAINT reservation: maintenance is the plan (DRAINED$)
    (["DRAIN", "REBOOT_REQUESTED"], False),    # scontrol reboot ASAP drains until the reboot (DRAINED@)
    (["DRAIN", "REBOOT_ISSUED"], False),       # the reboot is under way (DRAINED^)
])
def test_held_out_leaves_maintenance_and_reboots_alone(flags, held_out):
    """A drained node Slurm shows in a maintenance reservation or awaiting a reboot it asked for is held out
    on purpose (node_state_string: DRAINED$ / DRAINED@ / DRAINED^; scontrol(1) reboot ASAP, reservation
    Flags=MAINT): resuming it would undo the plan, so the heuristic does not offer it."""
    from datetime import UTC, datetime, timedelta

    from .worlds import run

    now = datetime(2026, 12, 5, tzinfo=UTC)
    world = inventory(instance("i-0000000000000a011", "10.0.1.11"))
    node = slurm.parse_node({"name": "ip-10-0-1-11", "state": ["IDLE", *flags], "address": "10.0.1.11",
                             "reason": "kernel upgrade CHG-1234", "reason_set_by_user": "root",
                             "reason_changed_at": {"set": True, "number": int((now - timedelta(days=3)).timestamp())}})
    view = SchedulerView("slurm", "test", (node,))
    report = run(world, ["scheduler-node-held-out"], extras={"scheduler_reader": lambda kind, settings: view},
                 now=now, scheduler={"kind": "slurm", "held_out_after": "1d"})
    assert report.errors == []
    assert [f.resource for f in report.findings] == (["i-0000000000000a011"] if held_out else [])
