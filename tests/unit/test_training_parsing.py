"""The pure parts of training-stalled: line formats from PyTorch, NCCL, aws-ofi-nccl/libfabric and torchrun
(see tests/fixtures/training/README.md), flight-recorder dumps, and the culprit vote."""

from __future__ import annotations

import os
import pickle
from datetime import UTC, datetime

import pytest

from fmdoctor.training.culprit import host_key, read_evidence
from fmdoctor.training.flight_recorder import DumpError, load_dump, parse_dump, rank_of
from fmdoctor.training.logs import LogEvent, stream_kind
from fmdoctor.training.signatures import parse_peer_error, parse_root_causes, parse_watchdog

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
