"""The demo's GPU story in CloudWatch: what the agent publishes for gpu-node-1..6, faults included.

* gpu-node-1, -2, -5 train at 93-96% utilization (healthy), gpu-node-5 with an agent configured without
  ``append_dimensions`` (only ``host``, ``index``, ``name``: found by hostname, not by guessing dimensions);
* gpu-node-2's GPU 5 grows its memory every period, 79% to 94% in half an hour: a leak heading for an
  out-of-memory error (gpu-memory-pressure); its other GPUs hold a steady 78%, like the caching allocator;
* gpu-node-3 sits idle at ~2%: drained from the job, still billing (gpu-idle);
* gpu-node-4, the node with 4 of its 32 EFA interfaces, waits on the network at ~58% (gpu-straggler);
* gpu-node-6, the hand-launched replacement, has no CloudWatch agent running (gpu-metrics-missing);
* one of gpu-node-1's 32 EFA interfaces counts retransmit timeouts and impaired peers (efa-errors).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from fmdoctor.demo.metrics import A100_40GB, MetricsPublisher

if TYPE_CHECKING:
    from fmdoctor.demo.scenario import DemoWorld

EFA_COUNTERS = ("efa_retrans_timeout_events", "efa_impaired_remote_conn_events", "efa_unresponsive_remote_events",
                "efa_rx_dropped")
SICK_CARD = 7
SICK_COUNTERS = {"efa_retrans_timeout_events": 42, "efa_impaired_remote_conn_events": 9}


def seed_gpu_metrics(world: DemoWorld) -> None:
    cloudwatch = world.session.client("cloudwatch", region_name=world.region)
    nodes = world.launched_nodes()
    publish = MetricsPublisher(cloudwatch, datetime.now(UTC), region=world.region, backend=world.cloudwatch_backend())

    leak = {5: {"memory_percent": [79.0, 82.0, 85.0, 88.0, 91.0, 94.0]}}
    for name, utilization in {"gpu-node-1": 96.0, "gpu-node-2": 95.0}.items():
        publish.gpu_node(nodes[name].id, nodes[name].private_ip, utilization, memory_percent=78.0,
                         by_period=leak if name == "gpu-node-2" else None)
    publish.gpu_node(nodes["gpu-node-3"].id, nodes["gpu-node-3"].private_ip, 2.0, memory_percent=0.6)
    publish.gpu_node(nodes["gpu-node-4"].id, nodes["gpu-node-4"].private_ip, 58.0, memory_percent=77.0)
    publish.gpu_node(nodes["gpu-node-5"].id, nodes["gpu-node-5"].private_ip, 93.0, gpu=A100_40GB,
                     memory_percent=83.0, instance_type="p4d.24xlarge", append_instance_id=False)
    # gpu-node-6: nothing at all; its agent is not running.

    sick_eni = nodes["gpu-node-1"].efa_enis()[SICK_CARD]
    for name in ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"):
        for card, eni in enumerate(nodes[name].efa_enis()):
            counters = SICK_COUNTERS if eni == sick_eni else {}
            publish.efa_interface(eni, f"rdmap{16 + card}s27", counters, metrics=EFA_COUNTERS)
    publish.flush()

    world.facts["gpu"] = {"idle": "gpu-node-3", "straggler": "gpu-node-4", "no_metrics": "gpu-node-6",
                          "memory_pressure": "gpu-node-2", "host_only": "gpu-node-5", "sick_efa": sick_eni}
    # The demo's instances were launched a second ago; in its story they have been training for days.
    world.settings.setdefault("gpu", {})["startup_grace"] = "0s"
