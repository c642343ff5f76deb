"""The demo's HyperPod GPU story, which lives in Prometheus rather than CloudWatch.

The team's HyperPod cluster (seed_health's ``demo-llm-hyperpod``) runs NVIDIA's DCGM exporter and the EFA exporter
on its workers, scraped into a Prometheus, as HyperPod's observability setups do; CloudWatch has nothing for its
nodes (they are not EC2 instances of the account). Of the three workers still Running:

* the first trains normally (95% utilization, tensor cores busy);
* the second sits idle at ~1%: taken out of the job and still billing (gpu-idle);
* the third is busy, but its GPU 3 reported Xid 48, an uncorrectable ECC error, 10 minutes ago (gpu-xid-metrics).

The history is OpenMetrics text here; :func:`fmdoctor.demo.runtime.demo_environment` loads it into a loopback
Prometheus when Debian's ``prometheus`` package is installed, else the demo says how to see it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from fmdoctor.demo.moto_health import set_hyperpod_node_dns
from fmdoctor.demo.openmetrics import OpenMetricsWriter

if TYPE_CHECKING:
    from fmdoctor.demo.scenario import DemoWorld

EFA_DEVICES = tuple(f"rdmap{16 + card}s27" for card in range(32))  # p5.48xlarge: 32 EFA devices
XID_GPU, XID_CODE = 3, 48


def seed_hyperpod_metrics(world: DemoWorld) -> None:
    facts = world.facts["hyperpod"]
    sagemaker = world.session.client("sagemaker", region_name=world.region)
    workers = sagemaker.list_cluster_nodes(ClusterName=facts["cluster"],
                                           InstanceGroupNameContains="worker-group-1")["ClusterNodeSummaries"]
    running = [w["InstanceId"] for w in workers if w["InstanceId"] != facts["failed_node"]]
    writer = OpenMetricsWriter(datetime.now(UTC))
    for n, node in enumerate(running):
        ip = f"10.1.0.{10 + n}"
        short = f"ip-{ip.replace('.', '-')}"
        set_hyperpod_node_dns(world.session, world.region, facts["cluster"], node,
                              f"{short}.{world.region}.compute.internal")
        dcgm = {"Hostname": short, "instance": f"{ip}:9400", "job": "dcgm_exporter"}
        if n == 1:
            writer.dcgm_node(dcgm, 1.0, memory_percent=0.6, tensor_active=0.0)
        else:
            writer.dcgm_node(dcgm, 95.0, memory_percent=81.0, tensor_active=0.46,
                             xid={XID_GPU: (XID_CODE, 4)} if n == 2 else None)
        writer.efa_node({"instance": f"{ip}:9100", "job": "efa_node_exporter"}, EFA_DEVICES)
    facts.update(idle=running[1], xid=running[2], xid_gpu=str(XID_GPU), xid_code=XID_CODE, healthy=running[0])
    world.facts["prometheus_history"] = writer.text()
