"""The pure parts of training-stalled: line formats from PyTorch, NCCL, aws-ofi-nccl/libfabric and torchrun
(see tests/fixtures/training/README.md), flight-recorder dumps, and the culprit vote."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
from datetime import UTC, datetime

import pytest

from fmdoctor.training.culprit import answer, host_key, read_evidence
from fmdoctor.training.flight_recorder import DumpError, load_dump, parse_dump, rank_of
from fmdoctor.training.logs import LogEvent, is_signature, stream_kind
from fmdoctor.training.signatures import (
    line_rank,
    parse_dump_signal,
    parse_peer_error,
    parse_root_causes,
    parse_watchdog,
)

NOW = datetime(2026, 5, 1, 10, 30, tzinfo=UTC)


def test_watchdog_lines_of_old_and_new_pytorch():
    old = ("[rank1]:[E1218 20:27:21.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) "
           "ran for 600088 milliseconds before timing out.")
    new = ("[rank7]:[E501 10:31:07.1 ProcessGroupNCCL.cpp:685] [PG ID 0 PG GUID 0(default_pg) Rank 7] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=64214, OpType=ALLGATHER, NumelIn=1, NumelOut=32, "
           "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")
    a, b = parse_watchdog(old, "h1", NOW), parse_watchdog(new, "h2", NOW)
    assert (a.rank, a.seq, a.op, a.timeout_ms, a.ran_ms, a.pg) == (1, 1, "BROADCAST", 600000, 600088, None)
    assert (b.rank, b.seq, b.op, b.pg) == (7, 64214, "ALLGATHER", "default_pg")
    assert parse_watchdog("Watchdog caught collective operation timeout", "h", NOW) is None


def test_peer_errors_name_the_peer_by_host_or_instance_id():
    socket = ("ip-10-0-0-4:48211:48390 [3] misc/socket.cc:58 NCCL WARN socketProgress: Connection closed by remote "
              "peer ip-10-0-0-5.us-west-2.compute.internal<43512>")
    efa = ("llama-3-8b-node-0-0:194:710 [0] int cm_req_handle_error_entry(...):46 NCCL WARN NET/OFI Request 0x7f45 "
           "completed with error. RC: 103. Error: 4126 (Unresponsive receiver (reachable by EFA device but handshake "
           "failed) My EFA addr: fi_addr_efa://[fe80::c55:2eff:fe44:db5]:0:142160333 My host id: i-07792e0f955a9673b "
           "Peer EFA addr: fi_addr_efa://[fe80::454:14ff:fedd:d5b3]:0:825957744 Peer host id: i-0f9e509bdf5c054bc). "
           "Completed length: 0")
    s, e = parse_peer_error(socket, None, NOW), parse_peer_error(efa, None, NOW)
    assert (s.reporter, host_key(s.peer), s.kind) == ("ip-10-0-0-4", "ip-10-0-0-5", "socket")
    assert (e.reporter, e.peer, e.kind) == ("i-07792e0f955a9673b", "i-0f9e509bdf5c054bc", "efa")
    assert e.detail.startswith("EFA error 4126 (Unresponsive receiver")
    # libfabric's 'Peer host id: N/A' (no handshake yet) names nobody
    assert parse_peer_error(efa.replace("i-0f9e509bdf5c054bc", "N/A"), None, NOW) is None


@pytest.mark.parametrize("joined", [False, True])
def test_torchrun_root_cause_as_one_event_or_one_per_line(joined):
    block = ["Root Cause (first observed failure):", "[0]:", "  time      : 2025-05-21_15:43:03",
             "  host      : ip-10-0-0-5", "  rank      : 13 (local_rank: 5)", "  exitcode  : -9 (pid: 14750)",
             "  error_file: <N/A>"]
    lines = [(NOW, "\n".join(block))] if joined else [(NOW, line) for line in block]
    [cause] = parse_root_causes(lines, "ip-10-0-0-5")
    assert (cause.host, cause.rank, cause.local_rank, cause.exitcode) == ("ip-10-0-0-5", 13, 5, -9)


def test_host_names_of_one_node_agree():
    assert {host_key(n) for n in ("ip-10-0-1-23", "ip-10-0-1-23.ec2.internal", "10.0.1.23",
                                  "IP-10-0-1-23.us-west-2.compute.internal")} == {"ip-10-0-1-23"}
    assert stream_kind("ip-10-0-1-23.i-0abcdef0123456789.training") == stream_kind(
        "ip-10-0-9-4.i-0fedcba9876543210.training")


def test_a_silent_host_is_one_whose_job_stream_logged_no_timeout():
    line = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 600100 milliseconds before timing out.")
    events = [LogEvent("g", f"ip-10-0-0-{n}.i-0000000000000000{n}.training", NOW, line.format(r=r), f"ip-10-0-0-{n}",
                       f"i-0000000000000000{n}") for n, r in ((4, 0), (6, 2))]
    streams = {f"ip-10-0-0-{n}.i-0000000000000000{n}.{log}": (f"ip-10-0-0-{n}", f"i-0000000000000000{n}")
               for n in (4, 5, 6) for log in ("training", "syslog")}
    streams["ip-10-0-0-9.i-00000000000000009.slurmctld"] = ("ip-10-0-0-9", "i-00000000000000009")  # head node
    evidence = read_evidence(events, streams)
    # each node is keyed by the instance id its streams carry
    assert evidence.job_hosts == {"i-00000000000000004", "i-00000000000000005", "i-00000000000000006"}


def dump(**extra):
    return {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": 2, "last_started_collective": -1,
                                "last_completed_collective": 1}},
            "entries": [{"pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 2,
                         "profiling_name": "nccl:all_reduce", "state": "scheduled", "time_created_ns": 1, **extra}]}


def test_flight_recorder_dumps_load_as_plain_data_only():
    parsed = parse_dump(1, "s3://b/nccl_trace_rank_1", load_dump(pickle.dumps(dump(), protocol=2)))
    assert parsed.groups["0"].last_enqueued == 2 and parsed.groups["0"].stuck_op == "nccl:all_reduce"
    assert parsed.members == {"0": [0, 1]}
    # A pickle that would run code when loaded is refused, never executed.
    evil = pickle.dumps(dump(frames=os.system))
    with pytest.raises(DumpError, match="plain data only"):
        load_dump(evil)
    with pytest.raises(DumpError):
        load_dump(b"\x80\x02not a pickle")
    assert load_dump(b'{"entries": [], "version": "2.4"}')["version"] == "2.4"  # dump_json's form


def test_dump_file_names_carry_the_rank():
    assert rank_of("fr/job/nccl_trace_rank_13", "nccl_trace_rank_") == 13
    assert rank_of("fr/job/nccl_trace_rank_13.pkl", "nccl_trace_rank_") == 13
    assert rank_of("fr/job/nccl_trace_rank_", "nccl_trace_rank_") is None
    assert rank_of("fr/job/README", "nccl_trace_rank_") is None
    assert rank_of("fr/job/nccl_trace_rank_\u00b2", "nccl_trace_rank_") is None  # a digit to isdigit, not to int
    assert rank_of("fr/job/nccl_trace_rank_abc", "nccl_trace_rank_") is None


@pytest.mark.parametrize(("data", "why"), [
    (b"\x80\x04]r\x00\x00\x00\x02.", "memo index 33554432 with 0 entries"),  # LONG_BINPUT far past the memo
    (b"\x80\x02]q\x05.", "memo index 5 with 0 entries"),
    (b"\x80\x02]h\x00.", "memo index 0 read before it was written"),
    (b"\x80\x02" + b"(" * 1001 + b".", "1001 open marks"),
    (b"\x80\x02" + b"]" * 100_001 + b".", "100001 stack slots"),
])
def test_the_unpickler_bounds_memo_nesting_and_batches(data, why):
    with pytest.raises(DumpError, match=why):
        load_dump(data)


@pytest.mark.parametrize("protocol", range(6))
def test_real_dumps_pass_the_bounds_at_every_protocol(protocol):
    many = dump(frames=[{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 2501}] * 20)
    many["entries"] = many["entries"] * 2000  # a full 2000-entry buffer (the same entry memoized)
    assert len(load_dump(pickle.dumps(many, protocol=protocol))["entries"]) == 2000


def test_rank_names_are_ascii_numbers_of_sane_length():
    assert rank_of("fr/nccl_trace_rank_\u00b2", "nccl_trace_rank_") is None  # '²'.isdigit() is True
    assert rank_of("fr/nccl_trace_rank_" + "9" * 5000, "nccl_trace_rank_") is None


# -- issue 36: ranks from everything the job wrote, waiting points, one key per node --------------------------------

SIGNAL = ("[rank13]:[E0501 10:31:08.0 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 13] Received a "
          "dump signal due to a collective timeout from  rank 7 and we will try our best to dump the debug info. Last "
          "enqueued NCCL work: 5209, last completed NCCL work: 5209.This is most likely caused by incorrect usages")


@pytest.mark.parametrize("text, rank", [
    ("[rank13]:step 5 loss 2.0", 13),  # the stderr prefix is the global rank
    (SIGNAL, 13),
    (SIGNAL.replace("[rank13]:", ""), 13),  # no prefix: the default group's Rank is the global rank
    ("[PG ID 0 PG GUID 0(default_pg) Rank 2] [PG ID 0 PG GUID 0(default_pg) Rank 2] Terminating the process after "
     "attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.", 2),
    ("[PG ID 1 PG GUID 1 Rank 2] Terminating the process after attempting to dump debug info, due to x.", None),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 4] ProcessGroupNCCL's watchdog got stuck for 480 seconds", 4),
    ("Rank 4 said nothing of the kind", None),
    # torchrun --tee puts its own "[<role><local rank>]:" before the worker's line (elastic/multiprocessing/tail_log.py)
    ("[default5]:[rank13]:step 5 loss 2.0", 13),
    ("[trainer0]:[rank13]:[E1205 02:33:10.1 ProcessGroupNCCL.cpp:1785] [PG ID 1 PG GUID 1 Rank 1] Terminating the "
     "process after attempting to dump debug info, due to collective timeout or exception.", 13),
    ("[default5]:step 5 loss 2.0", None),  # a local rank alone is no global rank
])
def test_which_rank_a_line_names(text, rank):
    assert line_rank(text) == rank


def test_a_ranks_own_dump_signal_line():
    signal = parse_dump_signal(SIGNAL, "h", NOW)
    assert (signal.rank, signal.pg, signal.last_enqueued, signal.last_completed) == (13, "default_pg", 5209, 5209)
    local = SIGNAL.replace("from  rank 7", "from this local rank").replace("NCCL work", "XCCL work")
    assert parse_dump_signal(local, None, NOW).last_enqueued == 5209  # newer releases name the backend
    assert parse_dump_signal("Received a dump signal due to a collective timeout", None, NOW) is None


REPORT = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-05-01_10:31:09
  host      : ip-10-0-0-5
  rank      : 13 (local_rank: 5)
  exitcode  : -15 (pid: 51243)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 51243
[2]:
  time      : 2026-05-01_10:31:09
  host      : ip-10-0-0-5
  rank      : 14 (local_rank: 6)
  exitcode  : -6 (pid: 51244)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 51244
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-05-01_10:31:09
  host      : ip-10-0-0-5
  rank      : 8 (local_rank: 0)
  exitcode  : -6 (pid: 51238)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 51238
============================================================"""


@pytest.mark.parametrize("shipped", ["one event", "one event per line", "filtered lines"])
def test_torchruns_whole_report_maps_ranks(shipped):
    """The Failures section's entries as well as the root cause; shipped as one event, one per line, or only the
    lines the filter pattern keeps (no '[i]:' markers, no borders)."""
    lines = REPORT.splitlines()
    if shipped == "one event":
        events = [(NOW, REPORT)]
    elif shipped == "one event per line":
        events = [(NOW, line) for line in lines]
    else:
        events = [(NOW, line) for line in lines if is_signature(line)]
    entries = parse_root_causes(events, "ip-10-0-0-5")
    assert [(e.rank, e.local_rank, e.exitcode, e.root) for e in entries] == [
        (13, 5, -15, False), (14, 6, -6, False), (8, 0, -6, True)]
    no_others = REPORT.split("Failures:")[0] + "Failures:\n  <NO_OTHER_FAILURES>\n" + REPORT.split("-" * 60)[-1]
    assert [(e.rank, e.root) for e in parse_root_causes([(NOW, no_others)], None)] == [(8, True)]


def _progress(rank, enqueued, completed, group="0"):
    from fmdoctor.training.flight_recorder import GroupProgress, RankDump

    return RankDump(rank, f"s3://b/nccl_trace_rank_{rank}", groups={group: GroupProgress(enqueued, completed)},
                    members={group: [0, 1, 2, 3]}, descs={group: "default_pg"})


@pytest.mark.parametrize("ranks, named, expected", [
    # (enqueued, completed) per rank 0..3; the watchdog's collective per group; (waiting_at, behind, waiting ranks)
    ([(12, 9), (12, 9), (9, 9), (12, 9)], {}, (10, {2: 9}, (0, 1, 3))),  # oldest pending, not newest enqueued
    ([(12, 9), (12, 9), (10, 9), (12, 9)], {"default_pg": 11}, (11, {2: 10}, (0, 1, 3))),  # the watchdog's
    ([(9, 9), (9, 9), (9, 9), (9, 9)], {}, None),  # nothing pending: nobody waits
    ([(12, 12), (12, 12), (9, 9), (12, 12)], {}, None),  # the others completed all they enqueued
    ([(12, 9), (12, 9), (12, 9), (12, 9)], {}, None),  # all wait together: nobody behind
])
def test_the_waiting_point_and_who_never_reached_it(ranks, named, expected):
    from fmdoctor.training.flight_recorder import find_laggards

    found = find_laggards([_progress(r, e, c) for r, (e, c) in enumerate(ranks)], named)
    assert ([(g.waiting_at, g.behind, g.waiting_ranks) for g in found] or [None]) == [expected]


def test_one_key_per_node_whatever_the_line_calls_it():
    from fmdoctor.engine.identity import NodeIdentities
    from fmdoctor.engine.inventory import Instance, Inventory
    from fmdoctor.training.culprit import NodeKeys

    node = Instance("i-0aaaaaaaaaaaaaaa1", "p5.48xlarge", "running", None, None, None, private_ip="10.0.0.5",
                    private_dns="ip-10-0-0-5.us-west-2.compute.internal")
    ids = NodeIdentities.of(Inventory("c", "us-west-2", (node,)))
    streams = {"queue1-st-p5-2.i-0aaaaaaaaaaaaaaa1.training": ("queue1-st-p5-2", "i-0aaaaaaaaaaaaaaa1"),
               "LifecycleConfig/workers/i-0bbbbbbbbbbbbbbb2": ("ip-10-1-0-7", "i-0bbbbbbbbbbbbbbb2")}
    keys = NodeKeys(ids, streams)
    for name in ("ip-10-0-0-5", "10.0.0.5", "i-0aaaaaaaaaaaaaaa1", "queue1-st-p5-2",
                 "ip-10-0-0-5.ec2.internal", "hyperpod-i-0aaaaaaaaaaaaaaa1"):
        assert keys(name) == "i-0aaaaaaaaaaaaaaa1", name
    assert keys("ip-10-1-0-7.us-west-2.compute.internal") == "i-0bbbbbbbbbbbbbbb2"  # a node no inventory lists
    assert keys("llama-worker-0") == "llama-worker-0" and keys("") is None


def test_a_rank_whose_own_line_says_it_never_enqueued_the_collective_is_behind():
    line = ("[rank{r}]:[E0501 10:31:07.4 ProcessGroupNCCL.cpp:685] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=5210, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600100 milliseconds before timing out.")
    events = [LogEvent("g", "ip-10-0-0-4.i-00000000000000004.training", NOW, line.format(r=r), "ip-10-0-0-4",
                       "i-00000000000000004") for r in (0, 1)]
    events.append(LogEvent("g", "ip-10-0-0-5.i-00000000000000005.training", NOW, SIGNAL.replace("rank13", "rank2")
                           .replace("Rank 13", "Rank 2"), "ip-10-0-0-5", "i-00000000000000005"))
    found = answer(read_evidence(events, {}), [])
    assert found.named["nccl-watchdog"] == ["i-00000000000000005"] and found.ranks == {"i-00000000000000005": [2]}
    assert "rank 2 on i-00000000000000005 never enqueued it (its last enqueued NCCL work: 5209)" in found.said[
        "nccl-watchdog"]
    other_group = events[:2] + [dataclasses.replace(events[2], text=events[2].text.replace(
        "PG GUID 0(default_pg)", "PG GUID 1(fsdp_shard)"))]
    assert "nccl-watchdog" not in answer(read_evidence(other_group, {}), []).named  # another group's counter


def test_a_sub_groups_rank_is_no_global_rank():
    """Without torchrun's ``[rankN]:`` prefix, the watchdog's ``Rank N`` of a group other than PG ID 0 is the rank
    within that group (pytorch/pytorch ProcessGroupNCCL.cpp ``createLogPrefix``: ``[PG ID %d PG GUID %s(%s) Rank
    %d]`` with the group's own ``rank_``): gpu-5's tensor-parallel group (global ranks 4-7) calls them 0-3. Mapping
    them as global ranks 0-3 would put the flight recorder's laggard (global rank 1, on gpu-4) on gpu-5."""
    from fmdoctor.training.flight_recorder import find_laggards

    tp = ("[E0501 10:31:07.4 ProcessGroupNCCL.cpp:685] [PG ID 1 PG GUID 1(tp) Rank {r}] Watchdog caught collective "
          "operation timeout: WorkNCCL(SeqNum=88, OpType=ALLGATHER, NumelIn=1, NumelOut=4, Timeout(ms)=600000) ran "
          "for 600100 milliseconds before timing out.")
    dp = tp.replace("PG ID 1 PG GUID 1(tp)", "PG ID 0 PG GUID 0(default_pg)").replace("SeqNum=88", "SeqNum=5210")
    b = ("ip-10-0-0-5.i-00000000000000005.training", "ip-10-0-0-5", "i-00000000000000005")
    a = ("ip-10-0-0-4.i-00000000000000004.training", "ip-10-0-0-4", "i-00000000000000004")
    events = [LogEvent("g", b[0], NOW, tp.format(r=r), b[1], b[2]) for r in range(4)]  # gpu-5 logs first
    events += [LogEvent("g", a[0], NOW, dp.format(r=r), a[1], a[2]) for r in (0, 2, 3)]  # rank 1 never times out
    evidence = read_evidence(events, {})
    assert all(evidence.rank_hosts.get(r) != "i-00000000000000005" for r in range(4))
    dumps = [_progress(r, 5212 if r != 1 else 5209, 5209) for r in range(4)]
    found = answer(evidence, find_laggards(dumps, {"default_pg": 5210}))
    assert "i-00000000000000005" not in found.culprits


def test_an_earlier_run_of_the_job_neither_maps_ranks_nor_names_the_culprit():
    """torch elastic restarts the workers (``--max-restarts``), Slurm requeues the job, HyperPod's auto-resume
    replaces a node: the same log group then holds an earlier run's hang, with its own rank placement and its own
    collective counters (SeqNum restarts at 0 in a new process group). Run 1 hung 2 hours ago on nodes 4 and 5
    (rank 5 silent at collective 5210); run 2, placed on nodes 6 and 7, hangs now at collective 300, its rank 2 on
    node 6 never enqueuing it (its own dump-signal line, the format of ``getNCCLWatchdogTimeoutErrorMsg``)."""
    from datetime import timedelta

    from fmdoctor.training.flight_recorder import find_laggards

    wd = ("[rank{r}]:[E0501 10:31:07.4 ProcessGroupNCCL.cpp:685] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog "
          "caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
          "Timeout(ms)=600000) ran for 600100 milliseconds before timing out.")

    def node(n):
        return f"ip-10-0-0-{n}.i-0000000000000000{n}.training", f"ip-10-0-0-{n}", f"i-0000000000000000{n}"

    def line(minutes_ago, n, text):
        stream, host, instance = node(n)
        return LogEvent("g", stream, NOW - timedelta(minutes=minutes_ago), text, host, instance)

    run1 = [line(120, 4 if r < 4 else 5, wd.format(r=r, seq=5210)) for r in range(8) if r != 5]
    run2 = [line(3, 6 if r < 4 else 7, wd.format(r=r, seq=300)) for r in range(8) if r != 2]
    run2.append(line(3, 6, SIGNAL.replace("rank13", "rank2").replace("Rank 13", "Rank 2").replace("5209", "299")))
    evidence = read_evidence(run1 + run2, {})
    assert evidence.rank_hosts[2] == "i-00000000000000006"
    dumps = [_progress(r, 300 if r != 2 else 299, 299) for r in range(4)]
    found = answer(evidence, find_laggards(dumps, evidence.waiting_points()))
    assert found.culprits == ["i-00000000000000006"] and not found.conflicts, (found.named, found.said)
    assert found.named["nccl-watchdog"] == ["i-00000000000000006"]


def test_a_slurm_hostname_kept_by_a_replacement_node_is_the_live_node():
    """ParallelCluster replaces an unhealthy static node under the same Slurm node name (aws-parallelcluster-node
    ``slurm_plugin``: NodeName ``{queue}-st-{compute resource}-{n}`` is fixed, the instance behind it changes), so
    the log group keeps the old instance's streams ``queue1-st-p5-2.<old id>.<log>`` beside the new one's. torchrun's
    ``host      : queue1-st-p5-2`` is the node running now, not the terminated one."""
    from fmdoctor.engine.identity import NodeIdentities
    from fmdoctor.engine.inventory import Instance, Inventory
    from fmdoctor.training.culprit import NodeKeys

    new = Instance("i-0bbbbbbbbbbbbbbb2", "p5.48xlarge", "running", None, None, None, private_ip="10.0.0.7",
                   private_dns="ip-10-0-0-7.us-west-2.compute.internal")
    ids = NodeIdentities.of(Inventory("c", "us-west-2", (new,)))
    streams = {"queue1-st-p5-2.i-0aaaaaaaaaaaaaaa1.training": ("queue1-st-p5-2", "i-0aaaaaaaaaaaaaaa1"),  # replaced
               "queue1-st-p5-2.i-0bbbbbbbbbbbbbbb2.training": ("queue1-st-p5-2", "i-0bbbbbbbbbbbbbbb2")}
    assert NodeKeys(ids, streams)("queue1-st-p5-2") == "i-0bbbbbbbbbbbbbbb2"
    # with no inventory to tell the live one, the name stays a name: neither instance is picked at random
    assert NodeKeys(None, streams)("queue1-st-p5-2") == "queue1-st-p5-2"


def test_a_node_of_another_job_is_not_the_silent_culprit():
    """Two jobs share the cluster and its ParallelCluster log group (``{hostname}.{instance_id}.{logIdentifier}``:
    the same log identifier on every node that runs the training script). Job 1 hangs on nodes 1-6, every rank of
    it timing out (the hung one on node 1 never times out but writes its dump-signal line); nodes 7 and 8 run a
    healthy job 2 whose streams hold no failure line. A stream of the same kind is no proof a node is in job 1:
    nodes 7 and 8 must not be named as the nodes that never joined."""
    wd = ("[rank{r}]:[E0501 10:31:07.4 ProcessGroupNCCL.cpp:685] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog "
          "caught collective operation timeout: WorkNCCL(SeqNum=5210, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
          "Timeout(ms)=600000) ran for 600100 milliseconds before timing out.")
    streams = {f"ip-10-0-0-{n}.i-0000000000000000{n}.training": (f"ip-10-0-0-{n}", f"i-0000000000000000{n}")
               for n in range(1, 9)}
    events = [LogEvent("g", f"ip-10-0-0-{1 + r // 8}.i-0000000000000000{1 + r // 8}.training", NOW, wd.format(r=r),
                       f"ip-10-0-0-{1 + r // 8}", f"i-0000000000000000{1 + r // 8}") for r in range(48) if r != 5]
    found = answer(read_evidence(events, streams), [])
    named = found.named.get("nccl-watchdog", [])
    assert "i-00000000000000007" not in named and "i-00000000000000008" not in named, found.said


def test_dumps_of_an_earlier_hang_under_the_same_prefix_are_not_this_runs():
    """A prefix covering every job's directory (``s3://bucket/fr/`` over ``fr/<job id>/nccl_trace_rank_<rank>``, the
    layout the README suggests) or a fixed ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` keeps an earlier hang's dumps.
    PyTorch writes a rank's dump when its watchdog times out, so a dump written before the run that hung began to
    time out is another hang's; a rank dumped twice is its newest dump. Here the earlier hang's rank 2 lags at
    collective 100 while in the hang being judged every rank reached 5210 but rank 1."""
    from datetime import timedelta

    from fmdoctor.training.flight_recorder import find_laggards, of_the_run

    def at(rank, enqueued, completed, minutes_ago, job):
        d = _progress(rank, enqueued, completed)
        d.source, d.written = f"s3://b/fr/{job}/nccl_trace_rank_{rank}", NOW - timedelta(minutes=minutes_ago)
        return d

    old = [at(r, 101 if r != 2 else 100, 100, 300, "job-76") for r in range(4)]
    new = [at(r, 5210 if r != 1 else 5209, 5209, 2, "job-77") for r in range(4)]
    kept, stale = of_the_run(old + new, NOW - timedelta(minutes=12))
    assert sorted(d.source for d in kept) == sorted(d.source for d in new) and stale == 4
    [group] = find_laggards(kept, {"default_pg": 5210})
    assert group.behind == {1: 5209}
    # without a run to date them by, each rank's newest dump still decides
    kept, stale = of_the_run(old[2:] + new, None)
    assert sorted(d.source for d in kept) == sorted(d.source for d in new) and stale == 2


# -- every PyTorch release's c10d lines (tests/fixtures/training/README.md, "Rank prefixes by release") -----------

WORK = "WorkNCCL(SeqNum=5210, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000)"


@pytest.mark.parametrize("line, rank, job_rank, pg, ran_ms", [
    # <= 2.2: checkTimeout's "[Rank N] " prefix, the whole line as the C++ logger wrote it
    (f"[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: {WORK} ran for 600351 "
     "milliseconds before timing out.", 3, 3, None, 600351),
    # <= 2.2 with the [rankN]: stderr prefix (torchrun) naming the global rank
    (f"[rank11]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: {WORK} ran for "
     "600351 milliseconds before timing out.", 11, 11, None, 600351),
    # 1.x: WorkNCCL printed a TensorShape instead of NumelIn/NumelOut
    ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5210, OpType=ALLREDUCE, "
     "TensorShape=[1024, 1024], Timeout(ms)=600000) ran for 600100 milliseconds before timing out.", 3, 3, None,
     600100),
    # NCCL_BLOCKING_WAIT=1 (<= 2.2): the same timeout met in wait(); it gives up at the timeout
    (f"[Rank 6] Work {WORK} timed out in blocking wait (NCCL_BLOCKING_WAIT=1).", 6, 6, None, 600000),
    # 2.3: "[PG <uid> Rank N]"
    (f"[PG 0 Rank 3] Watchdog caught collective operation timeout: {WORK} ran for 600081 milliseconds before timing "
     "out.", 3, 3, "0", 600081),
    # 2.4: "[PG <uid> (<desc>) Rank N]"
    (f"[PG 0 (default_pg) Rank 3] Watchdog caught collective operation timeout: {WORK} ran for 600081 milliseconds "
     "before timing out.", 3, 3, "default_pg", 600081),
    # 2.5+: "[PG ID <uid> PG GUID <guid>(<desc>) Rank N]", with and without a description
    (f"[PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught collective operation timeout: {WORK} ran for 600081 "
     "milliseconds before timing out.", 3, 3, "default_pg", 600081),
    (f"[PG ID 2 PG GUID 3 Rank 1] Watchdog caught collective operation timeout: {WORK} ran for 600081 milliseconds "
     "before timing out.", 1, None, "3", 600081),  # another group's Rank is no job rank
    (f"[PG 1 Rank 1] Watchdog caught collective operation timeout: {WORK} ran for 600081 milliseconds before timing "
     "out.", 1, None, "1", 600081),
    # 2.3-2.4: a group made with use_local_synchronization is named by its ranks' sha1 (_hash_ranks of 0_1_2_3)
    (f"[PG 79b6da6f09ca489d6c51917fe6d51102ba404551 Rank 1] Watchdog caught collective operation timeout: {WORK} "
     "ran for 600081 milliseconds before timing out.", 1, None, "79b6da6f09ca489d6c51917fe6d51102ba404551", 600081),
    # torchrun --tee's "[default3]:" before the [rankN]: prefix: the global rank is still the prefix's, not the group's
    (f"[default3]:[rank11]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [PG ID 1 PG GUID 1 Rank 1] Watchdog "
     f"caught collective operation timeout: {WORK} ran for 600081 milliseconds before timing out.", 11, 11, "1",
     600081),
])
def test_the_watchdog_timeout_of_every_release(line, rank, job_rank, pg, ran_ms):
    found = parse_watchdog(line, "h", NOW)
    assert found is not None, line
    assert (found.rank, found.global_rank, found.pg, found.seq, found.op, found.timeout_ms, found.ran_ms) == (
        rank, job_rank, pg, 5210, "ALLREDUCE", 600000, ran_ms)
    assert is_signature(line)  # the filter pattern asks CloudWatch Logs for it


@pytest.mark.parametrize("line", [
    # DeepSpeed's and Megatron's own "[Rank N]" lines are no timeout
    "[2024-04-21 02:45:24,651] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd_microstep: 3859.38",
    "[Rank 1] (after 1 iterations) memory (MB) | allocated: 4866.666015625",
    f"[Rank 3] Work {WORK} completed",
])
def test_rank_lines_that_are_no_timeout(line):
    assert parse_watchdog(line, "h", NOW) is None and parse_dump_signal(line, "h", NOW) is None


@pytest.mark.parametrize("line, rank, pg, enqueued, timed_out", [
    # 2.3 (real line from a public issue log: the completed counter is garbage there, and is not used)
    ("[rank7]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 7] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last "
     "completed NCCL work: 3452013982.", 7, "0", 1, 1),
    ("[rank1]:[E ProcessGroupNCCL.cpp:1540] [PG 1 Rank 1] Timeout at NCCL work: 7, last enqueued NCCL work: 8, last "
     "completed NCCL work: 6.", 1, "1", 8, 7),
    # 2.4
    ("[rank1]:[E1003 18:37:01.833621509 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 1] Timeout at NCCL work: "
     "6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.", 1, "default_pg", 6463, 6463),
    ("[PG 0 (default_pg) Rank 13] Received a dump signal from this local rank and will start to dump the debug info. "
     "Last enqueued NCCL work: 5209, last completed NCCL work: 5209.", 13, "default_pg", 5209, None),
    # 2.5+
    (SIGNAL, 13, "default_pg", 5209, None),
    # 2.6+ watchdogHandler: "Work timeout is detected by watchdog at work: N" replaced "Timeout at NCCL work: N"
    ("[rank3]:[E219 08:58:32.606667496 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank 1] Work timeout is detected "
     "by watchdog at work: 31, last enqueued NCCL work: 58, last completed NCCL work: 30.", 3, "3", 58, 31),
    # behind torchrun's tee header
    ("[default3]:[rank3]:[E219 08:58:32.606693321 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank 1] Timeout at "
     "NCCL work: 31, last enqueued NCCL work: 58, last completed NCCL work: 30.", 3, "3", 58, 31),
])
def test_a_ranks_own_progress_line_of_every_release(line, rank, pg, enqueued, timed_out):
    found = parse_dump_signal(line, "h", NOW)
    assert found is not None, line
    assert (found.rank, found.pg, found.last_enqueued, found.timed_out) == (rank, pg, enqueued, timed_out)
    assert line_rank(line) == rank and is_signature(line)


@pytest.mark.parametrize("line, rank", [
    # 2.2's heartbeat monitor on the rank whose watchdog hung (the one that never timed out)
    ("[Rank 13] NCCL monitor thread timeout. Basically, this could be due to CUDA or NCCL calls being unexpectedly "
     "blocking", 13),
    ("[Rank 13] monitoring thread detects no heartbeat and will finally kill the process! terminateProcessGroup_0 "
     "collectiveDebugInfoMode_0", 13),
    # 2.3 (real lines from a public issue log: the doubled prefix of the FATAL line)
    ("[rank25]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 25] Heartbeat monitor timed out! Process will be terminated "
     "after dumping debug info. workMetaList_.size()=2", 25),
    ("[PG 0 Rank 25] [PG 0 Rank 25] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in "
     "monitoring enqueued collectives.", 25),
    ("[PG 1 Rank 2] [PG 1 Rank 2] ProcessGroupNCCL's watchdog got stuck for 600 seconds", None),
])
def test_the_hung_ranks_own_lines_of_every_release(line, rank):
    assert line_rank(line) == rank and is_signature(line)


def test_a_rank_that_timed_out_itself_is_judged_by_its_timeout_not_its_progress_line():
    """2.3 prints two lines for a rank whose watchdog timed out: the watchdog's under ``[Rank N]`` and its progress
    under ``[PG 0 Rank N]`` ("Timeout at NCCL work: 5210, last enqueued NCCL work: 5211"). A rank that enqueued past
    the collective is not behind; rank 13, whose watchdog timed out in the collective before (5209), is, once."""
    events = []
    for rank in range(16):
        host = f"ip-10-0-0-{4 + rank // 8}"
        seq, enqueued = (5209, 5209) if rank == 13 else (5210, 5211)
        work = WORK.replace("5210", str(seq))
        events.append(LogEvent("g", f"{host}.training", NOW, f"[rank{rank}]:[E ProcessGroupNCCL.cpp:563] [Rank "
                               f"{rank}] Watchdog caught collective operation timeout: {work} ran for 600100 "
                               "milliseconds before timing out.", host, None))
        events.append(LogEvent("g", f"{host}.training", NOW, f"[rank{rank}]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank "
                               f"{rank}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {enqueued}, last "
                               f"completed NCCL work: {seq - 1}.", host, None))
    found = answer(read_evidence(events, {}), [])
    assert found.named["nccl-watchdog"] == ["ip-10-0-0-5"], found.said
    assert found.ranks["ip-10-0-0-5"] == [13]


# -- two jobs writing to one log group ------------------------------------------------------------------------------

def _two_jobs(tell: str) -> tuple[list[LogEvent], dict[str, str]]:
    """Jobs A (16 ranks on nodes 1-2) and B (24 ranks on nodes 3-5) run at once and write to one log group with the
    same log identifier; both hang. A's timeout is the newest: its rank 13 (node 2) timed out in collective 5209
    while its other ranks wait in 5210. B's ranks all time out a minute or two earlier in its own collective 9000,
    under the same rank numbers. Read as one job, every rank of A looks thousands of collectives behind B's and A's
    rank 13 is lost among them. ``tell``: how the jobs are told apart (the scheduler's job per node, torchrun's run
    id in its report, a pod's job labels)."""
    events, node_jobs = [], {}
    for job, first, seq, ranks in (("A", 1, 5210, 16), ("B", 3, 9000, 24)):
        for rank in range(ranks):
            n = first + rank // 8
            host, instance = f"ip-10-0-0-{n}", f"i-0000000000000000{n}"
            at = NOW.replace(minute=20 + rank // 16 if job == "B" else 22)
            work = WORK.replace("5210", str(5209 if (job, rank) == ("A", 13) else seq))
            text = (f"[rank{rank}]:[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog caught collective operation "
                    f"timeout: {work} ran for 600100 milliseconds before timing out.")
            label = f"training/llama-{job.lower()}" if tell == "labels" else None
            events.append(LogEvent("g", f"{host}.{instance}.training", at, text, host, instance, label))
            node_jobs[instance] = f"10{ord(job)}"
        if tell == "run id":  # each node's agent reports its ranks' failure, with the run's log directory
            for n in range(first, first + ranks // 8):
                report = ("Root Cause (first observed failure):\n[0]:\n  time      : 2026-05-01_10:31:09\n"
                          f"  host      : ip-10-0-0-{n}\n  rank      : {8 * (n - first)} (local_rank: 0)\n"
                          "  exitcode  : -6 (pid: 4242)\n"
                          f"  error_file: /tmp/torchelastic_sio2pi4d/llama-{job.lower()}_cejtyodz/attempt_0/0/"
                          "error.json\n  traceback : Signal 6 (SIGABRT) received by PID 4242")
                events.append(LogEvent("g", f"ip-10-0-0-{n}.i-0000000000000000{n}.training", at, report,
                                       f"ip-10-0-0-{n}", f"i-0000000000000000{n}"))
    events.sort(key=lambda e: e.time)
    return events, (node_jobs if tell == "scheduler" else {})


@pytest.mark.parametrize("tell, hung, other", [
    ("scheduler", "1065", ["1066"]),  # Slurm's running jobs and their node lists
    ("run id", "llama-a", ["llama-b"]),  # torchrun's --rdzv-id in its report's error_file
    ("labels", "training/llama-a", ["training/llama-b"]),  # a PyTorchJob's pods' training.kubeflow.org/job-name
])
def test_two_jobs_in_one_log_group_are_not_one_jobs_ranks(tell, hung, other):
    events, node_jobs = _two_jobs(tell)
    found = read_evidence(events, {}, node_jobs=node_jobs)
    assert (found.job, found.other_jobs) == (hung, other)
    culprit = answer(found, [])
    assert culprit.named["nccl-watchdog"] == ["i-00000000000000002"], culprit.said
    assert found.rank_hosts[0] == "i-00000000000000001"  # job A's rank 0, not job B's


@pytest.mark.parametrize("named, hung, other", [
    ("A", "llama-a", ["(a job that names no run)"]),  # the hung job names its run, the other uses --rdzv-id none
    ("B", None, ["llama-b"]),  # only the other job names its run
])
def test_two_jobs_of_which_only_one_names_its_run(named, hung, other):
    """torchrun's default run id 'none' names no run: the nodes whose lines name no job are another job's when one
    of their ranks timed out as the same rank on a node of the named job (a rank is one process on one node)."""
    events, _ = _two_jobs("run id")
    unnamed = "b" if named == "A" else "a"
    events = [dataclasses.replace(e, text=e.text.replace(f"llama-{unnamed}_", "none_")) for e in events]
    found = read_evidence(events, {})
    assert (found.job, found.other_jobs) == (hung, other)
    assert answer(found, []).named["nccl-watchdog"] == ["i-00000000000000002"]
    assert found.rank_hosts[0] == "i-00000000000000001"  # job A's rank 0, not job B's


def test_one_job_naming_its_run_on_some_nodes_only_is_one_job():
    """A job whose run id only one node's report carries (node 2 wrote none) is still one job: no rank of it timed
    out on two nodes, so none of its lines is left out."""
    events, _ = _two_jobs("run id")
    events = [e for e in events if e.instance_id in ("i-00000000000000001", "i-00000000000000002")
              and not ("error_file" in e.text and e.instance_id == "i-00000000000000002")]
    found = read_evidence(events, {})
    assert (found.job, found.other_jobs) == ("llama-a", [])
    assert len(found.watchdogs) == 16 and answer(found, []).named["nccl-watchdog"] == ["i-00000000000000002"]


def test_without_anything_to_tell_the_jobs_apart_every_line_is_read():
    """Nothing names a job (no scheduler, no run id, no labels): every line is read as one job's, as before."""
    events, _ = _two_jobs("nothing")
    found = read_evidence(events, {})
    assert (found.job, found.other_jobs) == (None, [])
    assert len(found.watchdogs) == 40


def test_a_fluent_bit_records_job_labels():
    from fmdoctor.training.logs import _events

    record = {"log": "[rank0]:step 5\n", "stream": "stderr",
              "kubernetes": {"host": "ip-10-0-0-1.us-west-2.compute.internal", "pod_name": "llama-a-worker-0",
                             "namespace_name": "training",
                             "labels": {"training.kubeflow.org/job-name": "llama-a",
                                        "training.kubeflow.org/replica-type": "worker"}}}
    stream = "ip-10-0-0-1.us-west-2.compute.internal-application.var.log.containers.llama-a-worker-0_training_x.log"
    [event] = _events("g", [{"logStreamName": stream, "timestamp": 1, "message": json.dumps(record)}])
    assert (event.text, event.job) == ("[rank0]:step 5", "training/llama-a")
    del record["kubernetes"]["labels"]
    [event] = _events("g", [{"logStreamName": stream, "timestamp": 1, "message": json.dumps(record)}])
    assert event.job is None


@pytest.mark.parametrize("line, run", [
    ("  error_file: /tmp/torchelastic_sio2pi4d/none_cejtyodz/attempt_0/0/error.json", None),  # the default run id
    ("  error_file: /tmp/torchelastic_sio2pi4d/4242_cejtyodz/attempt_1/3/error.json", "4242"),
    ("  error_file: <N/A>", None),
])
def test_torchruns_run_id_from_its_report(line, run):
    from fmdoctor.training.culprit import run_id

    assert run_id(line) == run


def test_srun_labels_are_taken_off_every_line():
    """``srun -l torchrun ...`` puts the task number before each line (Slurm's _build_label: "%*d: ", "P<n> %*d: " in
    a heterogeneous job): the rank prefix and torchrun's report read as written, also in one multi-line event."""
    from fmdoctor.training.logs import _events

    line = ("3: [default0]:[rank24]:[E1205 02:33:10.1 ProcessGroupNCCL.cpp:616] [Rank 24] Watchdog caught collective "
            f"operation timeout: {WORK} ran for 600081 milliseconds before timing out.")
    report = "\n".join(f"{n:>2}: {row}" for n, row in enumerate(REPORT.splitlines()))
    labelled = [line, "P1  3: [rank24]:step 5", report]
    events = list(_events("g", [{"logStreamName": "ip-10-0-0-5.i-00000000000000005.training", "timestamp": 1,
                                 "message": m} for m in labelled]))
    assert line_rank(events[0].text) == 24 and parse_watchdog(events[0].text, "h", NOW).global_rank == 24
    assert line_rank(events[1].text) == 24
    entries = parse_root_causes([(NOW, events[2].text)], "ip-10-0-0-5")
    assert [(e.rank, e.root) for e in entries] == [(13, False), (14, False), (8, True)]
