"""training-stalled against moto: the job's logs in CloudWatch Logs (fixtures in tests/fixtures/training, real
formats), its checkpoints in S3 and its NCCL flight-recorder dumps in S3."""

from __future__ import annotations

import json
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fmdoctor.demo.seed_health import dcp_files, write_checkpoint
from fmdoctor.demo.seed_training import put_lines
from fmdoctor.engine.model import Severity
from fmdoctor.report import render_json

from ..conftest import CLUSTER, REGION

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "training"
BUCKET = "team-ckpt"
LOCATION = f"s3://{BUCKET}/llm/run-9/"
PC_GROUP = f"/aws/parallelcluster/{CLUSTER}-202605010815"
ONLY = ["training-stalled"]


@pytest.fixture
def job(builder, aws):
    """Three p4d nodes of a ParallelCluster (Slurm) cluster, and the bucket the job checkpoints to."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2", "gpu-3"], "p4d.24xlarge", "private-a", ["efa"],
                   extra_tags={"parallelcluster:cluster-name": CLUSTER})
    aws.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    nodes = builder.launched
    return aws, nodes


def host(node) -> str:
    return "ip-" + node.private_ip.replace(".", "-")


def load_fixture(aws, nodes, name: str, group: str) -> None:
    """Put a fixture's events into moto's CloudWatch Logs, one PutLogEvents per stream."""
    logs = aws.client("logs")
    if not logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
        logs.create_log_group(logGroupName=group)
    now = datetime.now(UTC)
    streams: dict[str, list[tuple[datetime, str]]] = {}
    for line in (FIXTURES / name).read_text().splitlines():
        if line.startswith("#"):
            continue
        minutes, stream, message = line.split("|", 2)
        for node_name, node in nodes.items():
            for token, value in ((f"<{node_name}:id>", node.id), (f"<{node_name}:ip>", node.private_ip),
                                 (f"<{node_name}>", host(node))):
                stream, message = stream.replace(token, value), message.replace(token, value)
        streams.setdefault(stream, []).append((now - timedelta(minutes=int(minutes)), message))
    for stream, lines in streams.items():
        put_lines(logs, group, stream, lines)


def checkpoints(aws, minutes_ago: list[int]) -> None:
    now = datetime.now(UTC)
    for n, minutes in enumerate(sorted(minutes_ago, reverse=True)):
        write_checkpoint(aws, BUCKET, "llm/run-9/", f"step-{(n + 1) * 500:06d}", dcp_files(shards=2),
                         now - timedelta(minutes=minutes))


def dump(rank: int, enqueued: int, completed: int, world: int = 24, names: dict[int, str] | None = None) -> bytes:
    """A rank's flight-recorder dump as c10d pickles it (FlightRecorder.hpp keys, version 2.4); ``names`` gives
    some collectives another profiling name than all_reduce."""
    created = int((datetime.now(UTC) - timedelta(minutes=34)).timestamp() * 1e9)
    entries = [{"record_id": seq, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
                "p2p_seq_id": 0, "op_id": seq, "profiling_name": (names or {}).get(seq, "nccl:all_reduce"),
                "time_created_ns": created + seq, "input_sizes": [[262144000]], "input_dtypes": ["BFloat16"],
                "output_sizes": [[262144000]], "output_dtypes": ["BFloat16"],
                "state": "completed" if seq <= completed else "started", "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None, "retired": seq <= completed, "timeout_ms": 1800000,
                "is_p2p": False, "frames": [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 2501}]}
               for seq in range(enqueued - 3, enqueued + 1)]
    return pickle.dumps({
        "version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
        "pg_status": {"0": {"last_enqueued_collective": enqueued, "last_started_collective": -1,
                            "last_completed_collective": completed}},
        "entries": entries,
    }, protocol=2)


def test_a_hang_with_one_culprit_names_it_from_the_flight_recorder(job, run_checks):
    aws, nodes = job
    load_fixture(aws, nodes, "hang-one-culprit.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 38])  # every 30 minutes, until the hang
    s3 = aws.client("s3")
    for rank in range(24):  # rank 13 (GPU 5 of gpu-2) never enqueued collective 5210
        enqueued, completed = (5209, 5209) if rank == 13 else (5210, 5209)
        s3.put_object(Bucket=BUCKET, Key=f"fr/job-77/nccl_trace_rank_{rank}", Body=dump(rank, enqueued, completed))
    report = run_checks(ONLY, checkpoints={"locations": [LOCATION]},
                        training={"flight_recorder": [f"s3://{BUCKET}/fr/job-77/nccl_trace_rank_"]})
    assert report.errors == []
    [finding] = report.findings
    culprit = nodes["gpu-2"]
    assert finding.severity is Severity.CRITICAL and finding.resource == culprit.id
    evidence = finding.evidence
    assert [c["instance"] for c in evidence["culprits"]] == [culprit.id]
    assert evidence["named_by"] == "flight-recorder" and evidence["culprits"][0]["ranks"] == [13]
    assert set(evidence["corroborated_by"]) >= {"nccl-watchdog"} and not evidence["conflicting"]
    assert (f"wait in collective 5210 (nccl:all_reduce); never reached it: rank 13 on gpu-2 ({culprit.id}), its "
            "last 5209") in evidence["sources"]["flight-recorder"]
    assert evidence["culprits"][0]["xids"][0]["xid"] == 48
    assert "Xid 48" in finding.summary and "gpu-2" in finding.summary and "step-003000" in finding.summary
    command = evidence["culprits"][0]["take_out"]["command"]
    assert command.startswith("scontrol update NodeName=\"$(sinfo -h -N -o '%N %n' | awk -v h=" + host(culprit))
    assert "State=DRAIN Reason='fmdoctor training-stalled: hung the job at " in command
    assert "fix" not in evidence  # Slurm drains by command, not through an AWS API fmdoctor would call


def test_the_same_hang_without_dumps_is_named_by_the_watchdog_silence(job, run_checks):
    aws, nodes = job
    load_fixture(aws, nodes, "hang-one-culprit.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 38])
    [finding] = run_checks(ONLY, checkpoints={"locations": [LOCATION]}).findings
    assert finding.evidence["named_by"] == "nccl-watchdog"
    assert [c["instance"] for c in finding.evidence["culprits"]] == [nodes["gpu-2"].id]
    assert "16 rank(s) timed out in ALLREDUCE at collective 5210" in finding.evidence["sources"]["nccl-watchdog"]


def test_a_culprit_found_only_through_nccl_peer_errors(builder, aws, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2", "gpu-3"], "p4d.24xlarge", "private-a", ["efa"],
                   extra_tags={"eks:cluster-name": CLUSTER})
    nodes = builder.launched
    load_fixture(aws, nodes, "peer-errors-container-insights.log", f"/aws/containerinsights/{CLUSTER}/application")
    report = run_checks(ONLY)  # no checkpoints configured: the peer errors alone say it hung
    [finding] = report.findings
    assert finding.evidence["named_by"] == "peer-errors"
    assert [c["instance"] for c in finding.evidence["culprits"]] == [nodes["gpu-3"].id]
    node = f"{host(nodes['gpu-3'])}.{REGION}.compute.internal"
    assert finding.evidence["culprits"][0]["take_out"]["command"].startswith(f"kubectl cordon {node} ")
    assert finding.evidence["logs"]["groups"] == [f"/aws/containerinsights/{CLUSTER}/application"]


def test_conflicting_evidence_is_reported_as_such_and_proposes_no_fix(job, run_checks):
    aws, nodes = job
    load_fixture(aws, nodes, "conflicting.log", PC_GROUP)
    checkpoints(aws, [150, 120, 90, 60])
    [finding] = run_checks(ONLY, checkpoints={"locations": [LOCATION]}).findings
    evidence = finding.evidence
    assert evidence["named_by"] == "nccl-watchdog" and evidence["conflicting"] is True
    assert [c["instance"] for c in evidence["culprits"]] == [nodes["gpu-2"].id]
    assert evidence["conflicts"] == {"peer-errors": [nodes["gpu-3"].id]}
    assert (f"the evidence conflicts, so no fix is proposed: peer-errors names gpu-3 ({nodes['gpu-3'].id})"
            in finding.summary)
    assert_no_fix_anywhere(finding)


def assert_no_fix_anywhere(finding) -> None:
    """Conflicting sources: no action in the evidence, no command that takes a node out, and the runbook's
    take-the-node-out step not rendered; it says who disagrees and what to read next."""
    from fmdoctor.runbooks import get_runbook

    evidence = finding.evidence
    assert "fix" not in evidence and all(c["take_out"] is None and "fix" not in c for c in evidence["culprits"])
    text = json.dumps(evidence)
    assert not any(word in text for word in ("scontrol", "DRAIN", "kubectl", "cordon", "replace-hyperpod"))
    assert evidence["read_next"] and any("NCCL" in step for step in evidence["read_next"])
    rendered = get_runbook("training-stalled").render(finding, cluster=CLUSTER, region=REGION)
    assert "Take the node out" not in rendered and "scontrol update" not in rendered
    assert "The sources disagree (" in rendered and "Read next:" in rendered
    assert "Settle which node hung the job first" in rendered


def test_a_slow_but_progressing_job_has_no_finding(job, run_checks):
    aws, nodes = job
    load_fixture(aws, nodes, "slow-progress.log", PC_GROUP)
    checkpoints(aws, [160, 130, 100, 70, 40])  # 30 minutes apart; the newest is 40 minutes old, under 2x
    report = run_checks(ONLY, checkpoints={"locations": [LOCATION]})
    assert report.findings == [] and report.errors == [] and report.stats.checks_run == ONLY


def test_a_finished_job_has_no_finding(job, run_checks):
    aws, nodes = job
    load_fixture(aws, nodes, "finished.log", PC_GROUP)
    checkpoints(aws, [240, 210, 180, 150, 121])  # its last save, two hours ago
    report = run_checks(ONLY, checkpoints={"locations": [LOCATION]})
    assert report.findings == [] and report.errors == []


def test_without_logs_it_says_what_it_could_not_see_never_healthy(job, run_checks):
    aws, _ = job
    checkpoints(aws, [180, 150, 120])  # stopped an hour and a half after the usual 30 minutes
    report = run_checks(ONLY, checkpoints={"locations": [LOCATION]})
    [finding] = report.findings
    assert finding.severity is Severity.WARNING and "culprit is not named: its logs could not be read" in (
        finding.summary)
    [error] = report.errors
    assert error.code == "NoLogGroup" and f"/aws/parallelcluster/{CLUSTER}-<timestamp>" in error.message
    assert "training.log_groups" in error.message


def test_nothing_readable_at_all_is_unverified_not_healthy(job, run_checks):
    report = run_checks(ONLY)
    assert report.findings == [] and report.skipped == []
    assert {e.code for e in report.errors} == {"NoLogGroup"}


def hyperpod_log_group(aws, name: str) -> str:
    """The log group HyperPod (Slurm) writes a cluster's node logs to, /aws/sagemaker/Clusters/<name>/<id>, made."""
    arn = aws.client("sagemaker").describe_cluster(ClusterName=name)["ClusterArn"]
    group = f"/aws/sagemaker/Clusters/{name}/{arn.rsplit('/', 1)[-1]}"
    aws.client("logs").create_log_group(logGroupName=group)
    return group


def test_a_hyperpod_culprit_gets_the_gated_hyperpod_fix_its_xid_calls_for(aws, run_checks):
    """HyperPod streams carry the node's instance id (no EC2 instance behind it in DescribeInstances): the
    culprit is the HyperPod node, and its fix is HyperPod's API, an Xid 79 asking for a reboot."""
    from .test_hyperpod import create_hyperpod, node_ids

    name = create_hyperpod(aws)
    ids = node_ids(aws, name)
    group = hyperpod_log_group(aws, name)
    logs = aws.client("logs")
    now = datetime.now(UTC)
    hung, timed_out = now - timedelta(minutes=40), now - timedelta(minutes=10)
    for index, node in enumerate(ids):
        ranks = range(index * 8, index * 8 + 8)
        lines = [(hung - timedelta(minutes=2), f"[rank{r}]:step 900 loss 2.01") for r in ranks]
        if index != 1:
            lines += [(timed_out, f"[rank{r}]:[E1204 05:01:07.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] "
                       "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=901, OpType=ALLREDUCE, "
                       "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for 1800043 milliseconds "
                       "before timing out.") for r in ranks]
        put_lines(logs, group, f"training/workers/{node}", lines)
    put_lines(logs, group, f"syslog/workers/{ids[1]}", [(hung, (
        f"{hung:%b %d %H:%M:%S} ip-10-1-0-12 kernel: [812345.678901] NVRM: Xid (PCI:0000:a8:00): 79, pid=0, "
        "name=python, GPU has fallen off the bus."))])
    report = run_checks(ONLY, cluster=name)
    [finding] = report.findings
    [culprit] = finding.evidence["culprits"]
    # PyTorch before 2.3 has no heartbeat-monitor line for the hung ranks: only the Xid 79 names their node (a
    # stream that merely exists, like the job's, ties no node to the job: another job's nodes log there too)
    assert culprit["instance"] == ids[1] and finding.evidence["named_by"] == "gpu-faults"
    assert culprit["explained_by"].startswith("Xid 79")
    assert finding.evidence["fix"] == [{"action": "reboot-hyperpod-node", "cluster_name": name, "node_id": ids[1]}]
    assert finding.evidence["logs"]["groups"] == [group]


def test_a_culprit_found_only_through_its_gpu_fault(job, run_checks):
    """No timeout, peer error or summary was logged (the job hangs inside NCCL's 30-minute timeout, or the
    watchdog is off): the one node whose kernel log has a reboot-class Xid is named, and the stall is a stall
    because the checkpoints stopped coming."""
    aws, nodes = job
    logs = aws.client("logs")
    logs.create_log_group(logGroupName=PC_GROUP)
    now = datetime.now(UTC)
    for node in nodes.values():
        stream = f"{host(node)}.{node.id}.training"
        put_lines(logs, PC_GROUP, stream, [(now - timedelta(minutes=m), f"[rank0]:step {900 - m} loss 2.01")
                                           for m in (100, 98, 96)])
    culprit = nodes["gpu-3"]
    put_lines(logs, PC_GROUP, f"{host(culprit)}.{culprit.id}.syslog", [(now - timedelta(minutes=95), (
        f"{(now - timedelta(minutes=95)):%b %d %H:%M:%S} {host(culprit)} kernel: [812345.678901] NVRM: Xid "
        "(PCI:0000:a8:00): 79, pid=0, name=python, GPU has fallen off the bus."))])
    checkpoints(aws, [190, 160, 130, 100])  # every 30 minutes until 100 minutes ago
    [finding] = run_checks(ONLY, checkpoints={"locations": [LOCATION]}).findings
    evidence = finding.evidence
    assert evidence["named_by"] == "gpu-faults" and [c["instance"] for c in evidence["culprits"]] == [culprit.id]
    assert evidence["culprits"][0]["explained_by"].startswith("Xid 79 (GPU has fallen off the bus)")
    assert evidence["culprits"][0]["take_out"]["scheduler"] == "slurm"
    assert "named by the GPU faults in its logs" in finding.summary


def test_flight_recorder_dumps_on_fsx_are_read_through_its_s3_export(job):
    """TORCH_NCCL_DEBUG_INFO_TEMP_FILE=/fsx/fr/job-77/nccl_trace_rank_ on FSx for Lustre: the FSx API lists no
    files, so the dumps are read where the file system's data repository association exports them."""
    from fmdoctor.config import Settings
    from fmdoctor.engine.api import Connection, Doctor

    from .test_checkpoint_checks import FS, _dra, _fsx_factory

    aws, nodes = job
    load_fixture(aws, nodes, "hang-one-culprit.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 38])
    s3 = aws.client("s3")
    for rank in range(24):
        enqueued, completed = (5209, 5209) if rank == 13 else (5210, 5209)
        s3.put_object(Bucket=BUCKET, Key=f"exported/job-77/nccl_trace_rank_{rank}",
                      Body=dump(rank, enqueued, completed))
    factory = _fsx_factory([_dra(path="/fr", repo=f"s3://{BUCKET}/exported")])
    settings = Settings.model_validate({"clusters": {CLUSTER: {
        "checkpoints": {"locations": [LOCATION]},
        "training": {"flight_recorder": [f"fsx://{FS}/fr/job-77/nccl_trace_rank_"]}}}})
    report = Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=factory).check(
        CLUSTER, only=ONLY)
    assert report.errors == []
    [finding] = report.findings
    assert finding.evidence["named_by"] == "flight-recorder" and finding.evidence["flight_recorder"]["dumps"] == 24
    assert [c["instance"] for c in finding.evidence["culprits"]] == [nodes["gpu-2"].id]


def test_flight_recorder_on_fsx_without_an_export_is_said_so(job):
    from fmdoctor.config import Settings
    from fmdoctor.engine.api import Connection, Doctor

    from .test_checkpoint_checks import FS, _dra, _fsx_factory

    aws, nodes = job
    load_fixture(aws, nodes, "hang-one-culprit.log", PC_GROUP)
    factory = _fsx_factory([_dra(path="/ckpt")])  # exports another path only
    settings = Settings.model_validate({"clusters": {CLUSTER: {
        "training": {"flight_recorder": [f"fsx://{FS}/fr/job-77/nccl_trace_rank_"]}}}})
    report = Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=factory).check(
        CLUSTER, only=ONLY)
    [error] = report.errors
    assert error.code == "FsxContentsUnreadable"
    assert "no data repository association" in error.message and "fsx://" in error.unverified
    [finding] = report.findings  # the logs still name the culprit
    assert finding.evidence["named_by"] == "nccl-watchdog"


# --- issue 35 item 9: dumps are bounded before and while they are read ----------------------------------------
def hang_with(aws, nodes, extra: dict[str, bytes]) -> None:
    load_fixture(aws, nodes, "hang-one-culprit.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 38])
    s3 = aws.client("s3")
    for rank in range(24):
        enqueued, completed = (5209, 5209) if rank == 13 else (5210, 5209)
        s3.put_object(Bucket=BUCKET, Key=f"fr/job-77/nccl_trace_rank_{rank}", Body=dump(rank, enqueued, completed))
    for key, body in extra.items():
        s3.put_object(Bucket=BUCKET, Key=f"fr/job-77/{key}", Body=body)


def run_hang(run_checks):
    return run_checks(ONLY, checkpoints={"locations": [LOCATION]},
                      training={"flight_recorder": [f"s3://{BUCKET}/fr/job-77/nccl_trace_rank_"]})


def unreadable(report) -> dict[str, str]:
    return {e.unverified: e.message for e in report.errors if e.code == "UnreadableDump"}


def test_a_memo_bomb_dump_is_refused_without_its_memory(job, run_checks):
    import tracemalloc

    aws, nodes = job
    hang_with(aws, nodes, {"nccl_trace_rank_24": b"\x80\x04]r\x00\x00\x00\x02."})  # 9 bytes, 510 MiB of memo
    tracemalloc.start()
    try:
        report = run_hang(run_checks)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 1024 * 1024
    [(what, why)] = unreadable(report).items()
    assert "nccl_trace_rank_24" in what and "memo index 33554432" in why
    assert report.findings[0].evidence["culprits"][0]["ranks"] == [13]  # the other 24 dumps still name it


def test_a_dump_over_the_cap_is_refused_from_its_listed_size_unread(job, run_checks):
    from fmdoctor.training.flight_recorder import MAX_DUMP_BYTES

    aws, nodes = job
    hang_with(aws, nodes, {"nccl_trace_rank_30": bytes(MAX_DUMP_BYTES + 1)})
    report = run_hang(run_checks)
    [(what, why)] = unreadable(report).items()
    assert "nccl_trace_rank_30" in what and f"{MAX_DUMP_BYTES + 1} bytes, over the" in why
    assert report.stats.api_calls["s3.GetObject"] == 24  # the 24 real dumps; the big one was never fetched


@pytest.mark.parametrize("name", ["nccl_trace_rank_\u00b2", "nccl_trace_rank_" + "9" * 5000, "nccl_trace_rank_x"])
def test_a_dump_whose_name_has_no_numeric_rank_is_one_unreadable_dump(job, run_checks, name):
    aws, nodes = job
    hang_with(aws, nodes, {name: dump(99, 5210, 5209)})
    report = run_hang(run_checks)
    [(what, why)] = unreadable(report).items()
    assert "gives no rank" in why and not [e for e in report.errors if e.code == "InternalError"]
    assert report.findings[0].evidence["culprits"][0]["ranks"] == [13]


def test_an_unreadable_or_misnamed_dump_is_one_unreadable_dump(job, run_checks):
    """Beside the ranks' dumps: a file whose name has no rank number (or a digit int() refuses), one that is no
    dump, and one whose fields have the wrong types. Each is one gap; the other dumps still name the culprit."""
    aws, nodes = job
    load_fixture(aws, nodes, "hang-one-culprit.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 38])
    s3 = aws.client("s3")
    for rank in range(24):
        enqueued, completed = (5209, 5209) if rank == 13 else (5210, 5209)
        s3.put_object(Bucket=BUCKET, Key=f"fr/job-77/nccl_trace_rank_{rank}", Body=dump(rank, enqueued, completed))
    bad_fields = pickle.dumps({"entries": [], "pg_status": {"0": {"last_enqueued_collective": "soon"}}}, protocol=2)
    for name, body in (("nccl_trace_rank_abc", dump(0, 1, 1)), ("nccl_trace_rank_\u00b2", dump(0, 1, 1)),
                       ("nccl_trace_rank_24", b"\x80\x02truncated"), ("nccl_trace_rank_25", bad_fields)):
        s3.put_object(Bucket=BUCKET, Key=f"fr/job-77/{name}", Body=body)
    report = run_checks(ONLY, checkpoints={"locations": [LOCATION]},
                        training={"flight_recorder": [f"s3://{BUCKET}/fr/job-77/nccl_trace_rank_"]})
    assert sorted(e.code for e in report.errors) == ["UnreadableDump"] * 4
    assert all(e.unverified.startswith(f"the flight recorder dump s3://{BUCKET}/fr/job-77/") for e in report.errors)
    [finding] = report.findings
    assert finding.evidence["named_by"] == "flight-recorder" and finding.evidence["flight_recorder"]["dumps"] == 24
    assert [c["instance"] for c in finding.evidence["culprits"]] == [nodes["gpu-2"].id]


def put_dumps(aws, hung: int, hung_at: int, waiting_at: int, enqueued_behind: int) -> str:
    """Every rank's dump: the waiting ranks completed ``waiting_at - 1`` and enqueued up to ``enqueued_behind``
    (past the collective they are stuck in); the hung rank last enqueued ``hung_at``."""
    s3 = aws.client("s3")
    names = {seq: "nccl:reduce_scatter" for seq in range(waiting_at + 1, enqueued_behind + 1)}
    for rank in range(24):
        enqueued, completed = (hung_at, hung_at) if rank == hung else (enqueued_behind, waiting_at - 1)
        s3.put_object(Bucket=BUCKET, Key=f"fr/job-77/nccl_trace_rank_{rank}",
                      Body=dump(rank, enqueued, completed, names=names))
    return f"s3://{BUCKET}/fr/job-77/nccl_trace_rank_"


def test_a_culprit_only_the_flight_recorder_names(job, run_checks):
    """Rank 13 never times out (its watchdog is stuck); every host has ranks that did, torchrun's root causes come
    from all three nodes at once. Only the dumps name it; its own heartbeat-monitor lines map it to gpu-2. The
    waiting ranks enqueued two reduce_scatters behind the all_reduce they wait in: the waiting point is 5210."""
    aws, nodes = job
    load_fixture(aws, nodes, "hang-flight-recorder-only.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 38])
    prefix = put_dumps(aws, hung=13, hung_at=5209, waiting_at=5210, enqueued_behind=5212)
    report = run_checks(ONLY, checkpoints={"locations": [LOCATION]}, training={"flight_recorder": [prefix]})
    assert report.errors == []
    [finding] = report.findings
    evidence, culprit = finding.evidence, nodes["gpu-2"]
    assert evidence["named_by"] == "flight-recorder" and evidence["corroborated_by"] == []
    assert [c["instance"] for c in evidence["culprits"]] == [culprit.id] and evidence["culprits"][0]["ranks"] == [13]
    said = evidence["sources"]["flight-recorder"]
    assert "23 rank(s) wait in collective 5210 (nccl:all_reduce)" in said and "5212" not in said
    assert f"never reached it: rank 13 on gpu-2 ({culprit.id}), its last 5209" in said
    assert evidence["rank_hosts"]["13"] == {"host": culprit.id, "mapped_by": "its own lines"}
    assert "the logs do not show which rank never joined" in evidence["sources"]["nccl-watchdog"]
    assert not evidence["conflicting"] and evidence["culprits"][0]["take_out"]["scheduler"] == "slurm"


def test_a_culprit_mapped_by_torchruns_failures_section(job, run_checks):
    """Rank 13 writes nothing at all; gpu-2's torchrun report lists it under Failures (killed by its agent), not as
    the root cause: that entry is what maps the rank the dumps name to its node."""
    aws, nodes = job
    load_fixture(aws, nodes, "hang-torchrun-failures.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 38])
    prefix = put_dumps(aws, hung=13, hung_at=5209, waiting_at=5210, enqueued_behind=5211)
    [finding] = run_checks(ONLY, checkpoints={"locations": [LOCATION]}, training={"flight_recorder": [prefix]}).findings
    evidence = finding.evidence
    assert evidence["named_by"] == "flight-recorder"
    assert [c["instance"] for c in evidence["culprits"]] == [nodes["gpu-2"].id]
    assert evidence["rank_hosts"]["13"] == {"host": nodes["gpu-2"].id, "mapped_by": "torchrun's report"}
    assert "torchrun" not in evidence["conflicts"]  # its root causes come from every node at once: no vote


def test_a_culprit_named_by_efa_peer_errors_with_instance_ids(job, run_checks):
    """aws-ofi-nccl's completion errors on gpu-1 and gpu-3 carry libfabric EFA's 'Peer host id: i-...' of gpu-2;
    no timeout was logged yet (the hang is younger than NCCL's timeout)."""
    aws, nodes = job
    load_fixture(aws, nodes, "peer-errors-efa-instance-ids.log", PC_GROUP)
    [finding] = run_checks(ONLY).findings
    evidence = finding.evidence
    assert evidence["named_by"] == "peer-errors" and [c["instance"] for c in evidence["culprits"]] == [
        nodes["gpu-2"].id]
    assert f"EFA peer error(s) name gpu-2 ({nodes['gpu-2'].id}) by 2 host(s)" in evidence["sources"]["peer-errors"]
    assert not evidence["conflicting"]


def test_the_same_node_under_every_name_is_one_suspect(job, run_checks):
    """gpu-2 is 'queue1-st-p4d-2' in its streams and torchrun's report (ParallelCluster's Slurm hostnames), its
    instance id in aws-ofi-nccl's Peer host id, its IP in NCCL's socket error, and its Xid sits in its syslog
    stream: every source names the one node, they agree, and the drain names the Slurm node itself."""
    aws, nodes = job
    load_fixture(aws, nodes, "same-node-many-names.log", PC_GROUP)
    checkpoints(aws, [180, 150, 120, 90, 60, 40])
    [finding] = run_checks(ONLY, checkpoints={"locations": [LOCATION]}).findings
    evidence, culprit = finding.evidence, nodes["gpu-2"]
    assert [c["instance"] for c in evidence["culprits"]] == [culprit.id]
    assert evidence["named_by"] == "nccl-watchdog" and not evidence["conflicting"] and evidence["conflicts"] == {}
    assert set(evidence["corroborated_by"]) == {"peer-errors", "torchrun", "gpu-faults"}
    [named] = evidence["culprits"]
    assert named["explained_by"].startswith("Xid 79") and 13 in named["ranks"]
    assert named["take_out"]["command"].startswith("scontrol update NodeName=queue1-st-p4d-2 State=DRAIN Reason=")


def test_discovery_finds_the_container_insights_group_of_a_hyperpod_eks_cluster(aws):
    from fmdoctor.training.logs import discover_groups

    logs = aws.client("logs")
    for group in ("/aws/containerinsights/hp-eks/application", "/aws/containerinsights/hp-eks/performance",
                  "/aws/containerinsights/other/application"):
        logs.create_log_group(logGroupName=group)
    groups, looked_for = discover_groups(logs, "hp-train", "hp-train", "hp-eks")
    assert groups == ["/aws/containerinsights/hp-eks/application"]
    assert "/aws/containerinsights/hp-eks/application" in looked_for


def test_a_hyperpod_eks_culprit_from_fluent_bit_records(aws, run_checks):
    """HyperPod on EKS: Fluent Bit streams and records name each node 'hyperpod-<instance id>' (no EC2 instance of
    the account behind it); the node whose ranks' own dump-signal lines say they never enqueued the collective the
    others timed out in is the HyperPod node, fixed through HyperPod."""
    import json as _json

    from .test_hyperpod import create_hyperpod, node_ids

    name = create_hyperpod(aws)
    ids = node_ids(aws, name)
    group = "/aws/containerinsights/hp-eks/application"
    logs = aws.client("logs")
    logs.create_log_group(logGroupName=group)
    now = datetime.now(UTC)
    for index, node in enumerate(ids):
        stream = (f"hyperpod-{node}-application.var.log.containers.llama-worker-{index}_training_pytorch-"
                  "9b2f7e1c4d3a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c.log")
        lines = [(now - timedelta(minutes=40), f"[rank{index * 8}]:step 900 loss 2.01")]
        if index == 1:  # the hung ranks' own heartbeat monitor (getNCCLWatchdogTimeoutErrorMsg): never enqueued 901
            lines += [(now - timedelta(minutes=10), (
                f"[rank{r}]:[E1204 05:01:08.0 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
                "Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump "
                "the debug info. Last enqueued NCCL work: 900, last completed NCCL work: 900.This is most likely "
                "caused by incorrect usages of collectives")) for r in range(8, 16)]
        else:
            lines += [(now - timedelta(minutes=10), (
                f"[rank{r}]:[E1204 05:01:07.426415540 ProcessGroupNCCL.cpp:685] [PG ID 0 PG GUID 0(default_pg) "
                f"Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=901, OpType=ALLREDUCE, "
                "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for 1800043 milliseconds before timing "
                "out.")) for r in range(index * 8, index * 8 + 8)]
        records = [(t, _json.dumps({"log": text + "\n", "stream": "stderr", "kubernetes": {
            "pod_name": f"llama-worker-{index}", "namespace_name": "training", "host": f"hyperpod-{node}",
            "container_name": "pytorch"}})) for t, text in lines]
        put_lines(logs, group, stream, records)
    report = run_checks(ONLY, cluster=name, training={"log_groups": [group]})
    [finding] = report.findings
    [culprit] = finding.evidence["culprits"]
    assert culprit["instance"] == ids[1] and finding.evidence["named_by"] == "nccl-watchdog"
    assert f"HyperPod node {ids[1]}" in finding.summary
    assert finding.evidence["fix"] == [{"action": "replace-hyperpod-node", "cluster_name": name, "node_id": ids[1]}]


def test_a_healthy_job_in_fluent_bit_records_has_no_finding(aws, run_checks):
    """The modern layout as hard as the broken one: HyperPod on EKS, every node's pods logging steps, checkpoints
    every 30 minutes, the newest 10 minutes old; a NCCL INFO line mentioning the peer is not an error."""
    import json as _json

    from .test_hyperpod import create_hyperpod, node_ids

    name = create_hyperpod(aws)
    ids = node_ids(aws, name)
    aws.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    checkpoints(aws, [70, 40, 10])
    group = "/aws/containerinsights/hp-eks/application"
    logs = aws.client("logs")
    logs.create_log_group(logGroupName=group)
    now = datetime.now(UTC)
    for index, node in enumerate(ids):
        stream = f"hyperpod-{node}-application.var.log.containers.llama-worker-{index}_training_pytorch-0a1b.log"
        lines = [(now - timedelta(minutes=m), f"[rank{index * 8}]:step {900 - m} loss 2.01") for m in (6, 4, 2)]
        lines.append((now - timedelta(minutes=30), f"llama-worker-{index}:194:710 [0] NCCL INFO NET/OFI Selected "
                                                   "provider is efa, fabric is efa-direct (found 4 nics)"))
        put_lines(logs, group, stream, [(t, _json.dumps({"log": text + "\n", "stream": "stderr", "kubernetes": {
            "pod_name": f"llama-worker-{index}", "host": f"hyperpod-{node}"}})) for t, text in lines])
    report = run_checks(ONLY, cluster=name, checkpoints={"locations": [LOCATION]}, training={"log_groups": [group]})
    assert report.findings == [] and report.errors == []


def test_a_hyperpod_slurm_node_is_one_node_by_stream_id_and_hostname(aws, run_checks):
    """HyperPod Slurm streams carry the node's instance id; torchrun's report names its host, ip-10-1-0-12, which
    is the PrivateDnsHostname ListClusterNodes gives that node: the watchdog and torchrun agree (no conflict)."""
    from fmdoctor.demo.moto_health import set_hyperpod_node_dns

    from .test_hyperpod import create_hyperpod, node_ids

    name = create_hyperpod(aws)
    ids = node_ids(aws, name)
    for index, node in enumerate(ids):
        set_hyperpod_node_dns(aws, REGION, name, node, f"ip-10-1-0-{10 + index}.{REGION}.compute.internal")
    group = hyperpod_log_group(aws, name)
    logs = aws.client("logs")
    now = datetime.now(UTC)
    for index, node in enumerate(ids):
        ranks = range(index * 8, index * 8 + 8)
        lines = [(now - timedelta(minutes=42), f"[rank{r}]:step 900 loss 2.01") for r in ranks]
        if index != 1:
            lines += [(now - timedelta(minutes=10), f"[rank{r}]:[E1204 05:01:07.426415540 ProcessGroupNCCL.cpp:629] "
                       f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=901, "
                       "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for 1800043 "
                       "milliseconds before timing out.") for r in ranks]
        else:
            report = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-04_05:01:07",
                      "  host      : ip-10-1-0-11", "  rank      : 12 (local_rank: 4)", "  exitcode  : 1 (pid: 4242)"]
            lines += [(now - timedelta(minutes=40), line) for line in report]
        put_lines(logs, group, f"training/workers/{node}", lines)
    [finding] = run_checks(ONLY, cluster=name).findings
    evidence = finding.evidence
    assert [c["instance"] for c in evidence["culprits"]] == [ids[1]] and evidence["named_by"] == "nccl-watchdog"
    assert "torchrun" in evidence["corroborated_by"] and not evidence["conflicting"]
    assert evidence["fix"] == [{"action": "replace-hyperpod-node", "cluster_name": name, "node_id": ids[1]}]


def test_a_peer_id_that_is_no_node_of_the_hyperpod_cluster_gets_no_hyperpod_fix(aws, run_checks):
    """aws-ofi-nccl's ``Peer host id: i-...`` (libfabric EFA's ``fi_cq_strerror`` text) can name an instance
    ListClusterNodes does not list (a node HyperPod already replaced, another cluster's node on the same EFA
    fabric). It is named as the logs say, but a HyperPod replace/reboot goes only to a node of the cluster."""
    from .test_hyperpod import create_hyperpod, node_ids

    name = create_hyperpod(aws)
    ids = node_ids(aws, name)
    group = hyperpod_log_group(aws, name)
    logs = aws.client("logs")
    now = datetime.now(UTC)
    gone = "i-0fedcba9876543210"
    for node in ids:
        put_lines(logs, group, f"training/workers/{node}", [(now - timedelta(minutes=5), (
            "ip-10-1-0-12:194:710 [0] int cm_req_handle_error_entry(nccl_net_ofi_context_t*, fid_cq*, "
            "fi_cq_err_entry*, uint16_t):46 NCCL WARN NET/OFI Request 0x7f456c222f60 completed with error. RC: 103. "
            "Error: 4124 (Unresponsive receiver (connection previously established) My EFA addr: "
            f"fi_addr_efa://[fe80::c55:2eff:fe44:db5]:0:142160333 My host id: {node} Peer EFA addr: "
            f"fi_addr_efa://[fe80::8ff:a9ff:fe2c:61d]:0:1795162389 Peer host id: {gone}). Completed length: 0"))])
    report = run_checks(ONLY, cluster=name)
    [finding] = report.findings
    assert [c["instance"] for c in finding.evidence["culprits"]] in ([], [None]), finding.evidence["culprits"]
    assert "fix" not in finding.evidence and all(c.get("take_out") is None for c in finding.evidence["culprits"])


def _nested(depth: int) -> bytes:
    """A profiling_name nested ``depth`` tuples deep in a few bytes a level: TUPLE1 keeps the stack one slot deep."""
    head = pickle.dumps({"entries": [{"pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 5210,
                                      "state": "started", "profiling_name": None}],
                         "pg_status": {"0": {"last_enqueued_collective": 5210, "last_completed_collective": 5209}}},
                        protocol=2)
    marker = pickle.dumps(None, protocol=2)[2:-1]  # N
    assert head.count(marker) == 1
    return head.replace(marker, b"N" + b"\x85" * depth)  # TUPLE1 each level


# Adversarial review: shapes a hostile dump may have once it is plain data. Each is one unreadable dump; the
# other 24 still name the culprit, and nothing becomes an internal error or a traceback in the report.
HOSTILE_SHAPES = {
    "seq-is-a-list": pickle.dumps({"entries": [{"pg_id": 0, "collective_seq_id": [1]}]}, protocol=2),
    "status-is-a-list": pickle.dumps({"entries": [], "pg_status": ["0"]}, protocol=2),
    "config-is-a-list": pickle.dumps({"entries": [], "pg_config": ["0"]}, protocol=2),
    "ranks-infinite": pickle.dumps({"entries": [], "pg_config": {"0": {"ranks": "[1e400]"}}}, protocol=2),
    "enqueued-infinite": pickle.dumps({"entries": [], "pg_status": {"0": {"last_enqueued_collective": float("inf")}}},
                                      protocol=2),
    "enqueued-huge": pickle.dumps({"entries": [], "pg_status": {"0": {"last_enqueued_collective": 10 ** 20000,
                                                                      "last_completed_collective": 0}}}, protocol=2),
    "op-nested-deep": _nested(200_000),
    "op-is-a-dict": pickle.dumps({"entries": [{"pg_id": 0, "process_group": ("0", "x"), "collective_seq_id": 5210,
                                               "state": {"a": 1}, "profiling_name": {"x": [1] * 1000},
                                               "time_created_ns": "soon"}],
                                  "pg_status": {"0": {"last_enqueued_collective": 5210,
                                                      "last_completed_collective": 5209}}}, protocol=2),
}


@pytest.mark.parametrize("shape", sorted(HOSTILE_SHAPES))
def test_a_dump_of_hostile_shape_is_one_unreadable_dump(job, run_checks, shape):
    aws, nodes = job
    hang_with(aws, nodes, {"nccl_trace_rank_24": HOSTILE_SHAPES[shape]})
    report = run_hang(run_checks)
    assert not [e for e in report.errors if e.code == "InternalError"], report.errors
    if shape == "ranks-infinite":  # a pg_config whose ranks cannot be read is skipped, as before: no members
        assert not unreadable(report)
    else:
        [(what, _)] = unreadable(report).items()
        assert "nccl_trace_rank_24" in what
    assert report.findings[0].evidence["culprits"][0]["ranks"] == [13]
    render_json(report)  # the report renders (no recursion, no over-long integer)


def test_a_dump_that_memoizes_millions_of_objects_is_refused(job, run_checks):
    """Adversarial review: the memo keeps every object alive, so 3 bytes (``}\\x940``: a dict, memoized, popped)
    built a 64-byte dict and a 64 MiB dump 1.4 GiB of them; sets (216 bytes for 3) did worse. The walk counts
    the objects a load would build, and refuses sets, which no dump of plain data holds."""
    aws, nodes = job
    tail = b"}(U\x07entries]u."
    hang_with(aws, nodes, {"nccl_trace_rank_24": b"\x80\x04" + b"}\x940" * 4_000_001 + tail,  # 11 MiB
                           "nccl_trace_rank_25": b"\x80\x04" + b"\x8f\x940" * 1000 + tail})
    report = run_hang(run_checks)
    why = unreadable(report)
    assert "more than 4000000 objects" in why["the flight recorder dump s3://team-ckpt/fr/job-77/nccl_trace_rank_24"]
    assert "a set (EMPTY_SET)" in why["the flight recorder dump s3://team-ckpt/fr/job-77/nccl_trace_rank_25"]
    assert report.findings[0].evidence["culprits"][0]["ranks"] == [13]
