"""The demo's hung job in CloudWatch Logs: the 70B run of the checkpoint story stopped 95 minutes ago because
GPU 5 of gpu-node-2 fell off the bus (Xid 79 in its syslog stream). Every other rank's NCCL watchdog timed out
in the same all-reduce 30 minutes later; none of gpu-node-2's ranks did, and gpu-node-1's NCCL says gpu-node-2
closed the connection. The log group follows ParallelCluster's convention, so fmdoctor finds it by the cluster's
name; the lines are in the formats PyTorch, NCCL and the NVIDIA driver print (see fmdoctor.training.signatures).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fmdoctor.demo.scenario import DemoWorld

JOB_NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")
CULPRIT, CULPRIT_GPU = "gpu-node-2", 5
SEQ, TIMEOUT_MS = 88123, 1_800_000


def put_lines(logs: Any, group: str, stream: str, lines: Iterable[tuple[datetime, str]]) -> None:
    """One PutLogEvents per stream, as the CloudWatch agent ships a file (events in time order)."""
    existing = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=stream)["logStreams"]
    if not any(s["logStreamName"] == stream for s in existing):
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    events = [{"timestamp": int(t.timestamp() * 1000), "message": m} for t, m in sorted(lines, key=lambda x: x[0])]
    if events:
        logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def seed_training_logs(world: DemoWorld) -> None:
    now = datetime.now(UTC)
    logs = world.session.client("logs", region_name=world.region)
    nodes = world.launched_nodes()
    group = f"/aws/parallelcluster/{world.cluster}-202604120815"
    logs.create_log_group(logGroupName=group)
    hung = now - timedelta(minutes=95)
    timed_out = hung + timedelta(milliseconds=TIMEOUT_MS)
    for index, name in enumerate(JOB_NODES):
        host = "ip-" + nodes[name].private_ip.replace(".", "-")
        ranks = range(index * 8, index * 8 + 8)
        lines = [(hung - timedelta(minutes=m), f"[rank{r}]:[I{(hung - timedelta(minutes=m)):%m%d %H:%M:%S}] "
                  f"step {2400 - m // 2} loss 1.87") for m in (6, 4, 2) for r in ranks]
        if name != CULPRIT:
            wait = timedelta(milliseconds=TIMEOUT_MS + 81)
            lines += [(timed_out, f"[rank{r}]:[E{timed_out:%m%d %H:%M:%S}.426415540 ProcessGroupNCCL.cpp:629] "
                       f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={SEQ}, "
                       f"OpType=ALLREDUCE, NumelIn=262144000, NumelOut=262144000, Timeout(ms)={TIMEOUT_MS}) ran for "
                       f"{int(wait.total_seconds() * 1000)} milliseconds before timing out.") for r in ranks]
        if name == "gpu-node-1":
            peer = "ip-" + nodes[CULPRIT].private_ip.replace(".", "-")
            lines.append((hung + timedelta(seconds=40), f"{host}:48211:48390 [3] misc/socket.cc:58 NCCL WARN "
                          f"socketProgress: Connection closed by remote peer {peer}.{world.region}.compute.internal"
                          "<43512>"))
        put_lines(logs, group, f"{host}.{nodes[name].id}.training", lines)
        if name == CULPRIT:
            put_lines(logs, group, f"{host}.{nodes[name].id}.syslog", [(hung, (
                f"{hung:%b %d %H:%M:%S} {host} kernel: [812345.678901] NVRM: Xid (PCI:0000:a8:00): 79, pid=0, "
                "name=python, GPU has fallen off the bus."))])
    world.facts["training"] = {"log_group": group, "culprit": nodes[CULPRIT].id, "culprit_name": CULPRIT,
                               "hung_at": hung.isoformat(timespec="seconds")}
