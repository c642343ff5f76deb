"""Benchmark: the GPU checks for 10, 100 and 1,000 GPU nodes (8 GPUs each) against moto.

For each size it launches the nodes, publishes the CloudWatch agent's per-GPU metrics (one node idle, one
straggling, so every run must still find exactly those two), runs gpu-metrics-missing, gpu-idle,
gpu-straggler and gpu-memory-pressure through the real engine, and reports:

* CloudWatch calls made against the lower bound: ListMetrics ceil(series / 500) per metric name (the
  fewest pages that can list them), GetMetricData ceil(queries / 500);
* the same against the obvious per-instance client (ListMetrics per node and metric, GetMetricData per node),
  counted and, up to --naive-max nodes, timed in the same run;
* wall time as ratios within one run. moto's in-process latency is not CloudWatch's (real calls cost tens
  to hundreds of milliseconds each, so the call ratio is the figure that transfers), and no absolute
  time here is a claim about AWS.

    python bench/gpu_checks.py            # 10, 100, 1,000 nodes
    python bench/gpu_checks.py --quick    # 10 nodes, for CI

Exits 1 if any run makes more calls than the lower bound or misses the planted idle node or straggler.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

GPUS = 8
METRICS = ("nvidia_smi_utilization_gpu", "nvidia_smi_memory_used", "nvidia_smi_memory_total", "nvidia_smi_power_draw",
           "nvidia_smi_clocks_current_sm")
GPU_CHECKS = ["gpu-metrics-missing", "gpu-idle", "gpu-straggler", "gpu-memory-pressure"]
CLUSTER = "bench-gpu"
REGION = "us-west-2"
PAGE = 500


@dataclass
class Row:
    nodes: int
    series: int
    list_calls: int
    list_bound: int
    get_calls: int
    get_bound: int
    naive_calls: int
    check_s: float  # the whole engine run: inventory, CloudWatch, the four checks
    fetch_s: float  # its CloudWatch part alone, timed like the baseline
    naive_s: float | None
    found_planted: bool

    @property
    def ok(self) -> bool:
        return self.list_calls <= self.list_bound and self.get_calls <= self.get_bound and self.found_planted


def launch(ec2: Any, count: int) -> dict[str, str]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/18", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"]
    ids = []
    for start in range(0, count, 500):
        batch = min(500, count - start)
        reply = ec2.run_instances(
            ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=batch, MaxCount=batch, SubnetId=subnet,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "fmdoctor:cluster", "Value": CLUSTER}]}],
        )
        ids += [i["InstanceId"] for i in reply["Instances"]]
    return {instance_id: f"gpu-{n + 1}" for n, instance_id in enumerate(ids)}


def naive(cloudwatch: Any, nodes: list[Any], start: datetime, end: datetime) -> int:
    """The per-instance client this engine avoids: list each metric per node, fetch each node on its own."""
    calls = 0
    for node in nodes:
        queries = []
        for metric in METRICS:
            reply = cloudwatch.list_metrics(Namespace="CWAgent", MetricName=metric, RecentlyActive="PT3H",
                                            Dimensions=[{"Name": "InstanceId", "Value": node.id}])
            calls += 1
            queries += [{"Id": f"q{len(queries)}", "MetricStat": {"Metric": m, "Period": 300, "Stat": "Average"}}
                        for m in reply["Metrics"]]
        cloudwatch.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end)
        calls += 1
    return calls


def run_size(count: int, naive_max: int) -> Row:
    import boto3
    from moto import mock_aws

    from fmdoctor.config import Settings
    from fmdoctor.demo import moto_compat
    from fmdoctor.demo.metrics import MetricsPublisher, describe_nodes
    from fmdoctor.engine.api import Connection, Doctor
    from fmdoctor.metrics.cluster import load_cluster_metrics

    moto_compat.install()
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        ec2, cloudwatch = session.client("ec2"), session.client("cloudwatch")
        nodes = describe_nodes(ec2, launch(ec2, count))
        publish = MetricsPublisher(cloudwatch, datetime.now(UTC), region=REGION)
        idle, straggler = nodes[0], nodes[1]
        for node in nodes:
            utilization = 2.0 if node is idle else 55.0 if node is straggler else 95.0
            publish.gpu_node(node.id, node.private_ip, utilization)
        publish.flush()

        settings = Settings.model_validate({"clusters": {CLUSTER: {"gpu": {"startup_grace": "0s"}}}})
        doctor = Doctor(settings=settings, connection=Connection(region=REGION))
        started = time.perf_counter()
        report = doctor.check(CLUSTER, only=GPU_CHECKS)
        check_s = time.perf_counter() - started

        inventory = doctor.inventory(CLUSTER)
        started = time.perf_counter()
        snapshot = load_cluster_metrics(cloudwatch, inventory, settings.cluster(CLUSTER).gpu, report.generated_at)
        fetch_s = time.perf_counter() - started

        naive_s = None
        naive_calls = (len(METRICS) + 1) * count
        if count <= naive_max:
            started = time.perf_counter()
            naive_calls = naive(cloudwatch, nodes, report.generated_at - settings.gpu.window, report.generated_at)
            naive_s = time.perf_counter() - started

    series = count * GPUS
    calls = report.stats.api_calls
    found = {(f.check, f.resource) for f in report.findings}
    return Row(
        nodes=count,
        series=series,
        list_calls=calls.get("cloudwatch.ListMetrics", 0),
        list_bound=len(METRICS) * math.ceil(series / PAGE),
        get_calls=calls.get("cloudwatch.GetMetricData", 0),
        get_bound=math.ceil(series * len(METRICS) / 500),
        naive_calls=naive_calls,
        check_s=round(check_s, 2),
        fetch_s=round(fetch_s, 2),
        naive_s=None if naive_s is None else round(naive_s, 2),
        # Every series found once (no double counting), and exactly the planted faults.
        found_planted=(snapshot.queries == series * len(METRICS) and not report.errors
                       and found == {("gpu-idle", idle.id), ("gpu-straggler", straggler.id)}),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 nodes only (CI smoke run)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--naive-max", type=int, default=100,
                        help="time the per-instance baseline up to this many nodes (moto makes it slow beyond)")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": REGION})
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(key, None)
    sizes = [10] if args.quick else args.nodes

    rows = [run_size(n, args.naive_max) for n in sizes]
    print(f"{'nodes':>6} {'series':>7} | {'ListMetrics':>11} {'GetMetricData':>13} | {'per-instance':>12} "
          f"{'fewer':>6} | {'run s':>6} {'fetch s':>7} {'naive s':>7} {'faster':>6} | ok")
    for r in rows:
        ours = r.list_calls + r.get_calls
        faster = f"{r.naive_s / r.fetch_s:.1f}x" if r.naive_s and r.fetch_s else "-"
        naive_s = f"{r.naive_s:.2f}" if r.naive_s is not None else "-"
        print(f"{r.nodes:>6} {r.series:>7} | {f'{r.list_calls} / {r.list_bound}':>11} "
              f"{f'{r.get_calls} / {r.get_bound}':>13} | {r.naive_calls:>12} {r.naive_calls / ours:>5.1f}x | "
              f"{r.check_s:>6.2f} {r.fetch_s:>7.2f} {naive_s:>7} {faster:>6} | {'yes' if r.ok else 'NO'}")
    print(f"calls: made / lower bound. per-instance: {len(METRICS)} ListMetrics + 1 GetMetricData per node (timed "
          f"up to {args.naive_max} nodes). fetch s vs naive s: the same CloudWatch reads in moto, in this run only.")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([asdict(r) for r in rows], handle, indent=2)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
