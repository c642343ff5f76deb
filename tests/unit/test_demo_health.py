"""The demo's checkpoint, Spot, Capacity Block and HyperPod story: each planted fault found once, the healthy
parts silent."""

from __future__ import annotations

from fmdoctor.demo.runtime import demo_environment, demo_settings
from fmdoctor.engine.api import Connection, Doctor

HEALTH_CHECKS = ["checkpoint", "spot", "capacity", "hyperpod"]


def test_demo_health_faults():
    with demo_environment() as world:
        doctor = Doctor(settings=demo_settings(world), connection=Connection(region=world.region))
        report = doctor.check(world.cluster, only=HEALTH_CHECKS)
        hyperpod_only = doctor.check(world.facts["hyperpod"]["cluster"], only=["hyperpod-node-unhealthy"])
    found = sorted((f.check, f.resource) for f in report.findings)
    ckpt, spot, hp = world.facts["checkpoints"], world.facts["spot"], world.facts["hyperpod"]
    block = world.facts["capacity_block"]["reservation"]
    assert found == sorted([
        ("checkpoint-missing", ckpt["empty"]),
        ("checkpoint-stale", ckpt["location"]),
        ("checkpoint-incomplete", ckpt["incomplete"]),
        ("spot-interruption", spot["interrupted"]),
        ("spot-interruption-unprotected", spot["interrupted"]),
        ("spot-rebalance", spot["rebalance"]),
        ("capacity-block-expiring", block),
        ("hyperpod-node-unhealthy", hp["failed_node"]),
    ])
    assert report.errors == [] and report.skipped == []
    interruption = report.findings_for("spot-interruption")[0]
    assert {n["source"] for n in interruption.evidence["notices"]} == {"ec2", "sqs"}
    # The node termination handler shares the queue: its lifecycle-hook message is counted, not malformed.
    assert interruption.evidence["ignored_notices"] == {"other instances": 1, "other events": 1,
                                                        "Auto Scaling lifecycle-hook messages": 1}
    unprotected = report.findings_for("spot-interruption-unprotected")[0]
    assert unprotected.evidence["checkpoint"] == ckpt["usable"] and unprotected.evidence["minutes_lost"] >= 125
    assert unprotected.evidence["proof"]["method"] == "framework marker"  # step-002200's DCP .metadata
    assert unprotected.severity.value == "critical" and unprotected.evidence["proof"]["framework"] == "PyTorch DCP"
    incomplete = report.findings_for("checkpoint-incomplete")[0]
    assert incomplete.evidence["resume_from"]["uri"] == ckpt["usable"]
    # The DCP save that died before .metadata is proven incomplete by DCP's own writer: a critical.
    assert incomplete.severity.value == "critical" and incomplete.evidence["proof"]["proven"]
    # gpu-node-1 and -2 go 30 minutes before their Capacity Block ends, and checkpoints stopped 2 hours ago.
    [expiring] = report.findings_for("capacity-block-expiring")
    assert expiring.severity.value == "critical" and len(expiring.evidence["nodes"]) == 2
    assert expiring.evidence["checkpoint"] == ckpt["usable"] and expiring.evidence["minutes_lost"] >= 200
    # The HyperPod cluster is also a target of its own: discovery finds it though no EC2 instance is tagged.
    assert [f.resource for f in hyperpod_only.findings] == [hp["failed_node"]]
