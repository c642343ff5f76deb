"""The log lines that say a distributed job hung, and who it waits for, in the exact formats their sources print.

* PyTorch's NCCL watchdog (pytorch/pytorch ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``):
  ``[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64214, OpType=ALLGATHER,
  NumelIn=1, NumelOut=32, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.`` Newer releases
  prefix ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` instead of ``[Rank 3]``.
* NCCL's warnings (NVIDIA/nccl ``src/debug.cc``): ``<host>:<pid>:<tid> [<cuda dev>] [file:line (func)] NCCL WARN
  <message>``; the socket transport's ``socketProgress: Connection closed by remote peer <host><<port>>``
  (``src/misc/socket.cc``) and the IB transport's ``Got completion from peer <host><<port>>``
  (``src/transport/net_ib/p2p.cc``) name the peer.
* aws-ofi-nccl's ``NET/OFI Request ... completed with error`` carries libfabric's EFA error text
  (ofiwg/libfabric ``prov/efa``): ``... My EFA addr: ... My host id: i-... Peer EFA addr: ... Peer host id: i-...``.
* torchrun's failure summary (``torch/distributed/elastic/multiprocessing/errors``): ``Root Cause (first observed
  failure):`` then ``host      : <host>``, ``rank      : 13 (local_rank: 5)``, ``exitcode  : -6 (pid: 4242)``.
* torch elastic's agent on success (``torch/distributed/elastic/agent/server/api.py``): ``[default] worker group
  successfully finished. Waiting 300 seconds for other agents to finish.``
* A rank's ``RuntimeError: CUDA error: ...`` (CUDA's own error strings) says which rank met a GPU fault.
* The ``[rank13]:`` prefix PyTorch puts on each rank's stderr lines tells which rank a stream carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

WATCHDOG = re.compile(
    r"\[(?:PG ID (?P<pg_id>\d+) PG GUID (?P<pg_guid>[^\s(\]]+)(?:\((?P<pg_desc>[^)]*)\))? )?Rank (?P<rank>\d+)\]\s*"
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"[^)]*?Timeout\(ms\)=(?P<timeout_ms>\d+)\) ran for (?P<ran_ms>\d+) milliseconds"
)
NCCL_WARN = re.compile(r"(?:^|\s)(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                       r".*?NCCL WARN (?P<message>.*)$")
PEER_SOCKET = re.compile(r"(?:Connection closed by remote peer|Got completion from peer) (?P<peer>[\w.:-]+?)<\d+>")
PEER_HOST_ID = re.compile(r"Peer host id: (?P<peer>i-[0-9a-f]{8,17})")
MY_HOST_ID = re.compile(r"My host id: (?P<me>i-[0-9a-f]{8,17})")
EFA_ERROR = re.compile(r"Error: (?P<errno>\d+) \((?P<text>[^()]*(?:\([^()]*\))?[^()]*?)(?: My EFA addr|\))")
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):")
SUMMARY_FIELD = re.compile(r"^\s*(?P<key>host|rank|exitcode|time)\s*: (?P<value>.*?)\s*$", re.M)
SUMMARY_RANK = re.compile(r"(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)")
SUMMARY_EXIT = re.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
FINISHED = re.compile(r"worker group successfully finished")
RANK_PREFIX = re.compile(r"^\[rank(?P<rank>\d+)\]:")

# What the job's log groups are searched for (CloudWatch Logs filter pattern: '?' terms match any of them).
FILTER_TERMS = ("Watchdog caught collective operation timeout", "NCCL WARN", "Peer host id",
                "Root Cause (first observed failure)", "host      :", "rank      :", "exitcode  :",
                "NVRM: Xid", "worker group successfully finished", "CUDA error")
FILTER_PATTERN = " ".join(f'?"{term}"' for term in FILTER_TERMS)


@dataclass(frozen=True)
class Watchdog:
    rank: int
    seq: int
    op: str
    timeout_ms: int
    ran_ms: int
    pg: str | None  # process group description ('default_pg') where the message names one
    host: str | None
    time: datetime
    line: str


@dataclass(frozen=True)
class PeerError:
    """One rank's host says a peer failed it: the peer named by host name or by EC2 instance id."""

    reporter: str | None  # host (or instance id) that logged it
    peer: str  # host name, IP form or instance id
    kind: str  # 'socket' | 'efa'
    detail: str
    time: datetime
    line: str


@dataclass(frozen=True)
class RootCause:
    host: str | None
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    time: datetime
    reported_by: str | None


def parse_watchdog(text: str, host: str | None, time: datetime) -> Watchdog | None:
    match = WATCHDOG.search(text)
    if not match:
        return None
    return Watchdog(int(match["rank"]), int(match["seq"]), match["op"], int(match["timeout_ms"]),
                    int(match["ran_ms"]), match["pg_desc"] or match["pg_guid"], host, time, text.strip()[-400:])


def parse_peer_error(text: str, host: str | None, time: datetime) -> PeerError | None:
    """A socket or EFA error that names the peer; the reporter is the NCCL line's host, else the log's host."""
    warn = NCCL_WARN.search(text)
    reporter = warn["host"] if warn else host
    me = MY_HOST_ID.search(text)
    if me:
        reporter = me["me"]
    if (socket := PEER_SOCKET.search(text)) is not None:
        return PeerError(reporter, socket["peer"], "socket", (warn["message"] if warn else text).strip()[:300],
                         time, text.strip()[-400:])
    if (peer := PEER_HOST_ID.search(text)) is not None:
        error = EFA_ERROR.search(text)
        detail = f"EFA error {error['errno']} ({error['text'].strip()})" if error else "EFA request failed"
        return PeerError(reporter, peer["peer"], "efa", detail, time, text.strip()[-400:])
    return None


def rank_prefix(text: str) -> int | None:
    match = RANK_PREFIX.match(text)
    return int(match["rank"]) if match else None


def parse_root_causes(lines: list[tuple[datetime, str]], reporter: str | None) -> list[RootCause]:
    """torchrun's summary blocks in one stream's lines (in order): the fields after each 'Root Cause' heading.

    The CloudWatch agent may ship the block as one multi-line event or as one event per line; both parse."""
    found: list[RootCause] = []
    pending: dict[str, str] | None = None
    started: datetime | None = None

    def close() -> None:
        if pending is not None and started is not None and pending:
            rank = SUMMARY_RANK.search(pending.get("rank", ""))
            code = SUMMARY_EXIT.match(pending.get("exitcode", ""))
            found.append(RootCause(pending.get("host"), int(rank["rank"]) if rank else None,
                                   int(rank["local"]) if rank else None, int(code["code"]) if code else None,
                                   started, reporter))

    for time, text in lines:
        for part in text.splitlines() or [text]:
            if ROOT_CAUSE.search(part):
                close()
                pending, started = {}, time
                continue
            field = SUMMARY_FIELD.match(part)
            if pending is not None and field and field["key"] not in pending:
                pending[field["key"]] = field["value"]
                if len(pending) == 4:
                    close()
                    pending = None
    close()
    return found
