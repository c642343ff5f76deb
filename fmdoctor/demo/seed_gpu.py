"""The demo's GPU story in CloudWatch: what the agent publishes for gpu-node-1..6, faults included.

* gpu-node-1, -2, -5 train at 93-96% utilization (healthy), gpu-node-5 with an agent configured without
  ``append_dimensions`` (only ``host``, ``index``, ``name``: found by hostname, not by guessing dimensions);
* gpu-node-2's GPU 5 holds 99% of its memory (gpu-memory-pressure);
* gpu-node-3 sits idle at ~2%: drained from the job, still billing (gpu-idle);
* gpu-node-4, the node with 4 of its 32 EFA interfaces, waits on the network at ~58% (gpu-straggler);
* gpu-node-6, the hand-launched replacement, has no CloudWatch agent running (gpu-metrics-missing);
* one of gpu-node-1's 32 EFA interfaces counts retransmit timeouts and impaired peers (efa-errors).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fmdoctor.demo.metrics import A100_40GB, MetricsPublisher
from fmdoctor.demo.scenario import DemoWorld

EFA_COUNTERS = ("efa_retrans_timeout_events", "efa_impaired_remote_conn_events", "efa_unresponsive_remote_events",
                "efa_rx_dropped")
SICK_CARD = 7


def seed_gpu_metrics(world: DemoWorld) -> None:
    ec2 = world.session.client("ec2", region_name=world.region)
    cloudwatch = world.session.client("cloudwatch", region_name=world.region)
    nodes: dict[str, str] = world.facts["nodes"]
    described = _describe(ec2, list(nodes.values()))
    publish = MetricsPublisher(cloudwatch, datetime.now(UTC), region=world.region)

    def node(name: str) -> dict[str, Any]:
        return described[nodes[name]]

    busy = {"gpu-node-1": 96.0, "gpu-node-2": 95.0}
    for name, utilization in busy.items():
        memory = [78.0] * 8
        if name == "gpu-node-2":
            memory[5] = 99.2
        publish.gpu_node(nodes[name], node(name)["PrivateIpAddress"], utilization, memory_percent=memory)
    publish.gpu_node(nodes["gpu-node-3"], node("gpu-node-3")["PrivateIpAddress"], 2.0, memory_percent=0.6)
    publish.gpu_node(nodes["gpu-node-4"], node("gpu-node-4")["PrivateIpAddress"], 58.0, memory_percent=77.0)
    publish.gpu_node(nodes["gpu-node-5"], node("gpu-node-5")["PrivateIpAddress"], 93.0, gpu=A100_40GB,
                     memory_percent=83.0, instance_type="p4d.24xlarge", append_instance_id=False)
    # gpu-node-6: nothing at all; its agent is not running.

    for name in ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"):
        for eni in node(name)["NetworkInterfaces"]:
            if eni.get("InterfaceType") != "efa":
                continue
            card = eni.get("Attachment", {}).get("NetworkCardIndex", 0)
            sick = name == "gpu-node-1" and card == SICK_CARD
            counters = {"efa_retrans_timeout_events": 42, "efa_impaired_remote_conn_events": 9} if sick else {}
            publish.efa_interface(eni["NetworkInterfaceId"], f"rdmap{16 + card}s27", counters, metrics=EFA_COUNTERS)
    publish.flush()

    sick_eni = next(e["NetworkInterfaceId"] for e in node("gpu-node-1")["NetworkInterfaces"]
                    if e.get("Attachment", {}).get("NetworkCardIndex") == SICK_CARD)
    world.facts["gpu"] = {"idle": "gpu-node-3", "straggler": "gpu-node-4", "no_metrics": "gpu-node-6",
                          "memory_pressure": "gpu-node-2", "host_only": "gpu-node-5", "sick_efa": sick_eni}
    # The demo's instances were launched a second ago; in its story they have been training for days.
    world.settings.setdefault("gpu", {})["startup_grace"] = "0s"


def _describe(ec2: Any, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
    found = {}
    for page in ec2.get_paginator("describe_instances").paginate(InstanceIds=instance_ids):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = instance
    return found
