"""The log lines that say a distributed job hung, and who it waits for, in the exact formats their sources print.

* PyTorch's NCCL watchdog (pytorch/pytorch ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``):
  ``[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64214, OpType=ALLGATHER,
  NumelIn=1, NumelOut=32, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.`` (<= 2.2, and the
  watchdog line of 2.3-2.4); the group's prefix is ``[PG 0 Rank 3]`` in 2.3, ``[PG 0 (default_pg) Rank 3]`` in 2.4 and
  ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` from 2.5 (:data:`_PG_PREFIX` reads them all); with
  ``NCCL_BLOCKING_WAIT=1`` the timeout reads ``[Rank 3] Work WorkNCCL(...) timed out in blocking wait``.
* NCCL's warnings (NVIDIA/nccl ``src/debug.cc``): ``<host>:<pid>:<tid> [<cuda dev>] [file:line (func)] NCCL WARN
  <message>``; the socket transport's ``socketProgress: Connection closed by remote peer <host><<port>>``
  (``src/misc/socket.cc``) and the IB transport's ``Got completion from peer <host><<port>>``
  (``src/transport/net_ib/p2p.cc``) name the peer.
* aws-ofi-nccl's ``NET/OFI Request ... completed with error`` carries libfabric's EFA error text
  (ofiwg/libfabric ``prov/efa``): ``... My EFA addr: ... My host id: i-... Peer EFA addr: ... Peer host id: i-...``.
* The heartbeat monitor's lines of the same file, which every rank prints, the hung one included (it never times
  out itself): ``[PG ID 0 PG GUID 0(default_pg) Rank 13] Received a dump signal due to a collective timeout from
  rank 7 and we will try our best to dump the debug info. Last enqueued NCCL work: 5209, last completed NCCL work:
  5209.`` (``getNCCLWatchdogTimeoutErrorMsg``: a rank whose last enqueued work is below the collective the others
  timed out in never reached it), ``... Terminating the process after attempting to dump debug info, due to ...``
  (``getNCCLWatchdogTimeoutExitMsg``) and ``... ProcessGroupNCCL's watchdog got stuck for N seconds ...``; with the
  ``[rank13]:`` prefix each maps its rank to the host whose log carries it.
* torchrun's ChildFailedError report (``torch/distributed/elastic/multiprocessing/errors/__init__.py``,
  ``_MSG_FORMAT_TEMPLATE`` and ``_FAILURE_FORMAT_TEMPLATE``): a ``Failures:`` section listing every other failed
  rank, then ``Root Cause (first observed failure):``, each entry ``[i]:`` then ``time      :``,
  ``host      : <host>``, ``rank      : 13 (local_rank: 5)``, ``exitcode  : -6 (pid: 4242)``. Every entry maps a
  rank to a host; the root cause is also a (weak) vote for the culprit.
* torch elastic's agent on success (``torch/distributed/elastic/agent/server/api.py``): ``[default] worker group
  successfully finished. Waiting 300 seconds for other agents to finish.``
* A rank's ``RuntimeError: CUDA error: ...`` (CUDA's own error strings) says which rank met a GPU fault.
* The ``[rank13]:`` prefix PyTorch puts on each rank's stderr lines tells which rank a stream carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

NCCL_WARN = re.compile(r"(?:^|\s)(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                       r".*?NCCL WARN (?P<message>.*)$")
PEER_SOCKET = re.compile(r"(?:Connection closed by remote peer|Got completion from peer) (?P<peer>[\w.:-]+?)<\d+>")
PEER_HOST_ID = re.compile(r"Peer host id: (?P<peer>i-[0-9a-f]{8,17})")
MY_HOST_ID = re.compile(r"My host id: (?P<me>i-[0-9a-f]{8,17})")
EFA_ERROR = re.compile(r"Error: (?P<errno>\d+) \((?P<text>[^()]*(?:\([^()]*\))?[^()]*?)(?: My EFA addr|\))")
# The rank prefix of c10d's lines in every release: ``[Rank 3]`` (<= 2.2: ``"[Rank " << rank_ << "] "``),
# ``[PG 0 Rank 3]`` (2.3: the group's uid), ``[PG 0 (default_pg) Rank 3]`` (2.4: uid and description),
# ``[PG ID 0 PG GUID 0(default_pg) Rank 3]`` and ``[PG ID 2 PG GUID 3 Rank 3]`` (2.5+, ``createLogPrefix``).
# 2.3-2.4 print the group's name where 2.5+ print its local id: a counter ('1'), or with use_local_synchronization a
# hash of its ranks (distributed_c10d._process_group_name), so it is any word.
_PG_PREFIX = (r"\[(?:PG (?:ID )?(?P<pg_id>[^\s(\]]+) (?:PG GUID (?P<pg_guid>[^\s(\]]+))?"
              r"(?:\s*\((?P<pg_desc>[^)]*)\))? ?)?Rank (?P<rank>\d+)\]\s*")
_WORK = (r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)[^)]*?Timeout\(ms\)=(?P<timeout_ms>\d+)\)")
# The watchdog's timeout (every release), and the same timeout met in a blocking wait (NCCL_BLOCKING_WAIT=1:
# "[Rank N] Work WorkNCCL(...) timed out in blocking wait", <= 2.2; "Caught collective operation timeout", 1.x).
WATCHDOG = re.compile(_PG_PREFIX + r"(?:(?:Watchdog caught|Caught) collective operation timeout: |Work )" + _WORK
                      + r" (?:ran for (?P<ran_ms>\d+) milliseconds|timed out in blocking wait)")
# A rank's own account of where its default group stands: 2.5+ "Received a dump signal due to a collective timeout
# from rank 7 and we will try our best to dump the debug info. Last enqueued NCCL work: ..."; 2.4 "Received a dump
# signal from this local rank and will start to dump the debug info. Last enqueued NCCL work: ..."; 2.3-2.5 "Timeout
# at NCCL work: 7, last enqueued NCCL work: 8, last completed NCCL work: 6.", 2.6+ "Work timeout is detected by
# watchdog at work: 7, last enqueued ..." (a rank whose own watchdog timed out; watchdogHandler).
DUMP_SIGNAL = re.compile(
    _PG_PREFIX + r"(?:Received a dump signal (?:due to a collective timeout )?from\s*(?P<origin>this local rank|"
    r"rank -?\d+)?\s*and (?:we )?will (?:try our best to|start to) dump the debug info\. Last enqueued \w+ work: "
    r"(?P<enqueued>-?\d+), last completed \w+ work: (?P<completed>-?\d+)|"
    r"(?:Timeout at \w+|Work timeout is detected by watchdog at) work: (?P<timed_out>\d+), "
    r"last enqueued \w+ work: (?P<enqueued2>-?\d+), last completed \w+ work: (?P<completed2>-?\d+))")
RANK_LINE = re.compile(_PG_PREFIX + r"(?:\[PG [^\]]*\] )?(?:Terminating the process after attempting to dump|"
                       r"ProcessGroupNCCL's watchdog got stuck for|Observed flight recorder dump signal|"
                       r"Heartbeat monitor timed out|NCCL monitor thread timeout|"
                       r"monitoring thread detects no heartbeat)")
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):")
FAILURES = re.compile(r"^\s*Failures:\s*$")
SUMMARY_FIELD = re.compile(r"^\s*(?P<key>host|rank|exitcode|time)\s*: (?P<value>.*?)\s*$", re.M)
SUMMARY_RANK = re.compile(r"(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)")
SUMMARY_EXIT = re.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
FINISHED = re.compile(r"worker group successfully finished")
# PyTorch's ``[rank13]:`` on each rank's stderr, behind torchrun's own header where it tees the workers' output to
# its console (``--tee``: ``[default5]:``, ``[<role><local rank>]:``; torch/distributed/elastic/multiprocessing/
# tail_log.py).
RANK_PREFIX = re.compile(r"^(?:\[[A-Za-z_][\w-]*?\d+\]:)?\[rank(?P<rank>\d+)\]:")

# What the job's log groups are searched for (CloudWatch Logs filter pattern: '?' terms match any of them).
FILTER_TERMS = ("Watchdog caught collective operation timeout", "NCCL WARN", "Peer host id",
                "Received a dump signal", "Terminating the process after attempting to dump",
                "watchdog got stuck for", "Failures:", "Root Cause (first observed failure)", "time      :",
                "host      :", "rank      :", "exitcode  :", "NVRM: Xid", "worker group successfully finished",
                "CUDA error", "Caught collective operation timeout", "timed out in blocking wait",
                "Timeout at NCCL work", "Work timeout is detected by watchdog", "Heartbeat monitor timed out",
                "NCCL monitor thread timeout", "monitoring thread detects no heartbeat", "error_file:")
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
    global_rank: int | None = None  # the job's rank, where the line tells it (not a sub-group's rank)


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
    """One entry of torchrun's report: the root cause (``root``) or one of the other failures it lists."""

    host: str | None
    rank: int | None
    local_rank: int | None
    exitcode: int | None
    time: datetime
    reported_by: str | None
    root: bool = True


@dataclass(frozen=True)
class DumpSignal:
    """A rank's own account when told to dump: the last collective it enqueued and completed in its default group."""

    rank: int
    pg: str | None
    last_enqueued: int
    last_completed: int
    host: str | None
    time: datetime
    line: str
    timed_out: int | None = None  # 2.3-2.5's "Timeout at NCCL work: N": the rank's own watchdog timed out at N


def parse_watchdog(text: str, host: str | None, time: datetime) -> Watchdog | None:
    match = WATCHDOG.search(text)
    if not match:
        return None
    timeout = int(match["timeout_ms"])  # a blocking wait gives up at the timeout
    return Watchdog(_global_rank(text, match), int(match["seq"]), match["op"], timeout,
                    int(match["ran_ms"]) if match["ran_ms"] else timeout, _group(match), host, time,
                    text.strip()[-400:], _job_rank(text, match))


def parse_dump_signal(text: str, host: str | None, time: datetime) -> DumpSignal | None:
    match = DUMP_SIGNAL.search(text)
    if not match:
        return None
    enqueued, completed = match["enqueued"] or match["enqueued2"], match["completed"] or match["completed2"]
    return DumpSignal(_global_rank(text, match), _group(match), int(enqueued), int(completed), host, time,
                      text.strip()[-400:], int(match["timed_out"]) if match["timed_out"] else None)


def _group(match: re.Match[str]) -> str | None:
    """The process group a prefix names: its description ('default_pg'), else its GUID, else (2.3) its uid; None
    for a release that names no group."""
    return match["pg_desc"] or match["pg_guid"] or match["pg_id"]


def line_rank(text: str) -> int | None:
    """The global rank a line of the job names as its writer: the ``[rank13]:`` prefix PyTorch puts on each rank's
    stderr, else the ``Rank 13`` of a default-group c10d line (the heartbeat monitor's), else None."""
    match = RANK_LINE.search(text) or DUMP_SIGNAL.search(text)
    return _job_rank(text, match) if match else rank_prefix(text)


def _job_rank(text: str, match: re.Match[str]) -> int | None:
    """The job's (global) rank a c10d line names: the ``[rankN]:`` prefix, else its ``Rank N`` when the prefix
    names the default group (PG ID 0) or no group (older releases). Another group's ``Rank N`` is the rank within
    that group (``createLogPrefix`` prints the group's own rank), so it names no global rank."""
    prefixed = rank_prefix(text)
    if prefixed is not None:
        return prefixed
    return int(match["rank"]) if match["pg_id"] in (None, "0") else None


def _global_rank(text: str, match: re.Match[str]) -> int:
    """The ``[rankN]:`` prefix is the global rank; a c10d prefix's ``Rank N`` is the rank within its group."""
    prefixed = rank_prefix(text)
    return prefixed if prefixed is not None else int(match["rank"])


def parse_peer_error(text: str, host: str | None, time: datetime) -> PeerError | None:
    """A socket or EFA error that names the peer; the reporter is libfabric's 'My host id', else the node whose log
    carries the line, else the NCCL line's host (in a container, the pod's name)."""
    warn = NCCL_WARN.search(text)
    reporter = host or (warn["host"] if warn else None)
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


# srun --label's task number before each line a task writes (Slurm's _build_label: "%*d: ", with a heterogeneous
# job's "P<component> " before it), as ParallelCluster jobs launched with "srun -l torchrun ..." log it.
SRUN_LABEL = re.compile(r"^(?:P\d+ )?[ ]*\d+: ", re.M)


def unlabelled(text: str) -> str:
    """``text`` with srun's task label taken off each of its lines (a multi-line event has one on every line), so
    the prefixes and torchrun's report read as they were written."""
    return SRUN_LABEL.sub("", text)


def rank_prefix(text: str) -> int | None:
    match = RANK_PREFIX.match(text)
    return int(match["rank"]) if match else None


def parse_root_causes(lines: list[tuple[datetime, str]], reporter: str | None) -> list[RootCause]:
    """Every entry of torchrun's reports in one stream's lines (in order): those of the ``Failures:`` section
    (``root`` False) and of ``Root Cause (first observed failure):``.

    The CloudWatch agent may ship a report as one multi-line event or as one event per line, and a filter pattern
    keeps only some of its lines (no ``[i]:`` markers): an entry ends at the next marker, heading or border, or
    where a field it already has comes again."""
    found: list[RootCause] = []
    pending: dict[str, str] | None = None
    section: bool | None = None  # None: outside a report; True: root cause; False: other failures
    started: datetime | None = None

    def close() -> None:
        nonlocal pending
        if pending and started is not None and section is not None:
            rank = SUMMARY_RANK.search(pending.get("rank", ""))
            code = SUMMARY_EXIT.match(pending.get("exitcode", ""))
            found.append(RootCause(pending.get("host"), int(rank["rank"]) if rank else None,
                                   int(rank["local"]) if rank else None, int(code["code"]) if code else None,
                                   started, reporter, root=section))
        pending = None

    for time, text in lines:
        for part in text.splitlines() or [text]:
            if ROOT_CAUSE.search(part) or FAILURES.match(part):
                close()
                section, started = bool(ROOT_CAUSE.search(part)), time
                continue
            if section is None:
                continue
            stripped = part.strip()
            if _ENTRY.match(stripped) or stripped.startswith(("===", "---")):
                close()
                if stripped.startswith("==="):
                    section = section if section is False else None  # a report ends after its root cause
                continue
            field = SUMMARY_FIELD.match(part)
            if not field:
                continue
            if pending is not None and field["key"] in pending:
                close()
            pending = pending if pending is not None else {}
            pending[field["key"]] = field["value"]
            started = started or time
    close()
    return found


_ENTRY = re.compile(r"^\[\d+\]:$")
