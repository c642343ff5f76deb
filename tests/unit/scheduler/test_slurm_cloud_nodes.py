"""ParallelCluster's dynamic (CLOUD) nodes on the real Slurm 22.05 (slurm_cluster.py with ``cloud_nodes``).

A dynamic node powered down is ``idle~`` (IDLE + CLOUD + POWERED_DOWN); one asked to power up for a job is
``allocated#`` and Slurm's own sinfo --json also carries NOT_RESPONDING until its slurmd registers (seen here:
``'state_flags': ['CLOUD', 'NOT_RESPONDING', 'POWERING_UP']``). Slurm itself ranks the power flag above the
not-responding one (src/common/slurm_protocol_defs.c, node_state_string: ``IDLE#``/``ALLOCATED#`` before
``*``), and a node that never comes up is set DOWN "ResumeTimeout reached" by slurmctld. Neither is a node
held out: both are how every scale-up looks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fmdoctor.scheduler import slurm as slurm_source

from .slurm_cluster import SlurmCluster, missing, slurm_cluster
from .worlds import instance, inventory, run

CLOUD = "queue1-dy-p5-[1-2]"


@pytest.fixture(scope="module")
def cloud_cluster() -> Iterator[SlurmCluster]:
    why = missing()
    if why:
        pytest.skip(why)
    with slurm_cluster(cloud_nodes=CLOUD) as cluster:
        yield cluster


def test_powered_down_and_powering_up_cloud_nodes_are_not_held_out(cloud_cluster: SlurmCluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(cloud_cluster.conf))
    cloud_cluster.run(["sbatch", "--parsable", "-J", "scale-up", "-N", "1", "-w", "queue1-dy-p5-1", "--wrap",
                       "sleep 600", "-o", "/dev/null"])
    cloud_cluster.wait(lambda: "#" in cloud_cluster.state("queue1-dy-p5-1"), "queue1-dy-p5-1 powering up")
    raw = {n["name"]: n for n in json.loads(cloud_cluster.run(["sinfo", "--json"]))["nodes"]}
    # what Slurm 22.05 itself says (the reason for this test): the powering-up node is flagged NOT_RESPONDING
    assert {"CLOUD", "POWERING_UP", "NOT_RESPONDING"} <= set(raw["queue1-dy-p5-1"]["state_flags"])
    assert {"CLOUD", "POWERED_DOWN"} <= set(raw["queue1-dy-p5-2"]["state_flags"])

    view = {n.name: n for n in slurm_source.read_local().nodes}
    assert view["queue1-dy-p5-1"].has("POWERING_UP") and not view["queue1-dy-p5-1"].has("NOT_RESPONDING")
    assert view["queue1-dy-p5-2"].has("POWERED_DOWN") and not view["queue1-dy-p5-2"].has("DOWN", "NOT_RESPONDING")

    healthy = inventory(instance("i-0000000000000a011", "10.0.1.11"), instance("i-0000000000000a012", "10.0.1.12"))
    report = run(healthy, ["scheduler-node-down", "scheduler-node-held-out"], scheduler={"kind": "slurm"})
    assert report.errors == []
    # only the fixture's INVAL gres node (ip-10-0-1-14) is held out; no cloud node is
    assert [f.resource for f in report.findings] == ["slurm:ip-10-0-1-14"]


@pytest.mark.parametrize(("flags", "responding"), [
    (["NOT_RESPONDING"], False),                                   # idle*: a registered node that stopped answering
    (["CLOUD", "NOT_RESPONDING", "POWERING_UP"], True),            # idle#: booting
    (["CLOUD", "NOT_RESPONDING", "POWERED_DOWN"], True),           # idle~: off by design
    (["CLOUD", "NOT_RESPONDING", "POWERING_DOWN"], True),          # idle%: being suspended
    (["CLOUD", "NOT_RESPONDING", "POWER_DOWN"], True),             # idle!: suspend requested
])
def test_not_responding_counts_only_where_slurm_shows_the_star(flags, responding):
    node = slurm_source.parse_node({"name": "queue1-dy-p5-1", "state": "idle", "state_flags": flags})
    assert node.has("NOT_RESPONDING") is not responding
    # 23.02+ (data parser v0.0.39+): state is the list of base state and flags
    node23 = slurm_source.parse_node({"name": "queue1-dy-p5-1", "state": ["IDLE", *flags]})
    assert node23.has("NOT_RESPONDING") is not responding
