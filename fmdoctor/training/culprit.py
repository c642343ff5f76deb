"""Who hung the job: each source's answer, the strongest one, and where the others disagree.

Sources in the order they are trusted: the flight recorder (the ranks that never enqueued the collective the
others wait at), the NCCL watchdog (ranks that timed out at an earlier collective, or a host none of whose ranks
timed out while the others' did), peer errors (the host the most other hosts say dropped them), torchrun's
"Root Cause" (the first rank that exited), and last the GPU faults in the logs (a rank's ``CUDA error`` or a
kernel Xid whose catalogue action is a GPU reset or worse), when exactly one host has them. Hosts are compared
in a normal form (``ip-10-0-1-23``, or an instance id) so the same node named by a stream, an NCCL line and a
summary is one suspect.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from fmdoctor.node.xid import parse_kernel_log
from fmdoctor.node.xid_catalogue import ACTION_ORDER
from fmdoctor.training.flight_recorder import Laggards
from fmdoctor.training.logs import LogEvent, stream_kind
from fmdoctor.training.signatures import (
    PeerError,
    RootCause,
    Watchdog,
    parse_peer_error,
    parse_root_causes,
    parse_watchdog,
    rank_prefix,
)

FLIGHT_RECORDER, WATCHDOG, PEER_ERRORS, TORCHRUN = "flight-recorder", "nccl-watchdog", "peer-errors", "torchrun"
GPU_FAULTS = "gpu-faults"
SOURCES = (FLIGHT_RECORDER, WATCHDOG, PEER_ERRORS, TORCHRUN, GPU_FAULTS)
READABLE = {FLIGHT_RECORDER: "the NCCL flight recorder dumps", WATCHDOG: "the NCCL watchdog timeouts",
            PEER_ERRORS: "NCCL/EFA peer errors", TORCHRUN: "torchrun's failure summary",
            GPU_FAULTS: "the GPU faults in its logs"}
_IP = re.compile(r"^(?:ip-)?(\d{1,3})[-.](\d{1,3})[-.](\d{1,3})[-.](\d{1,3})$")


def host_key(name: str | None) -> str | None:
    """'ip-10-0-1-23.us-west-2.compute.internal', 'ip-10-0-1-23' and '10.0.1.23' are one node."""
    if not name:
        return None
    name = name.strip().lower()
    if name.startswith("i-"):
        return name
    short = name.split(".", 1)[0] if not _IP.match(name) else name
    ip = _IP.match(short) or _IP.match(name)
    return f"ip-{'-'.join(ip.groups())}" if ip else short


@dataclass
class Evidence:
    """What the logs said, parsed once."""

    watchdogs: list[Watchdog] = field(default_factory=list)
    peer_errors: list[PeerError] = field(default_factory=list)
    root_causes: list[RootCause] = field(default_factory=list)
    finished: list[LogEvent] = field(default_factory=list)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    hosts: dict[str, str | None] = field(default_factory=dict)  # host key -> instance id, where a stream says
    job_hosts: set[str] = field(default_factory=set)  # hosts with a stream like those that logged a timeout
    gpu_faults: dict[str, list[LogEvent]] = field(default_factory=dict)  # host key -> CUDA error / grave Xid lines

    @property
    def failures(self) -> bool:
        return bool(self.watchdogs or self.peer_errors or self.root_causes)

    def last_failure(self) -> datetime | None:
        times = [w.time for w in self.watchdogs] + [p.time for p in self.peer_errors]
        times += [r.time for r in self.root_causes]
        return max(times, default=None)


def read_evidence(events: list[LogEvent], streams: dict[str, tuple[str | None, str | None]]) -> Evidence:
    """Parse the failure lines; ``streams`` (every stream of the groups, with its host) tells which nodes write
    the same kind of output as those whose ranks timed out."""
    found = Evidence()
    for host, instance in streams.values():
        if (key := host_key(host) or host_key(instance)) is not None:
            found.hosts.setdefault(key, instance)
    timed_out_kinds: set[str] = set()
    by_stream: dict[tuple[str, str], list[LogEvent]] = defaultdict(list)
    for event in events:
        key = host_key(event.host) or host_key(event.instance_id)
        if key:
            found.hosts.setdefault(key, event.instance_id)
        by_stream[(event.group, event.stream)].append(event)
        rank = rank_prefix(event.text)
        if rank is not None and key:
            found.rank_hosts.setdefault(rank, key)
        if (watchdog := parse_watchdog(event.text, key, event.time)) is not None:
            found.watchdogs.append(watchdog)
            timed_out_kinds.add(stream_kind(event.stream))
            if key:
                found.rank_hosts.setdefault(watchdog.rank, key)
        elif (peer := parse_peer_error(event.text, event.host or event.instance_id, event.time)) is not None:
            found.peer_errors.append(peer)
        elif "worker group successfully finished" in event.text:
            found.finished.append(event)
        elif key and _gpu_fault(event):
            found.gpu_faults.setdefault(key, []).append(event)
    for stream_events in by_stream.values():
        reporter = host_key(stream_events[0].host) or host_key(stream_events[0].instance_id)
        found.root_causes += parse_root_causes([(e.time, e.text) for e in stream_events], reporter)
    found.job_hosts = {key for stream, (host, instance) in streams.items()
                       if stream_kind(stream) in timed_out_kinds and (key := host_key(host) or host_key(instance))}
    for cause in found.root_causes:
        if cause.rank is not None and host_key(cause.host):
            found.rank_hosts.setdefault(cause.rank, host_key(cause.host) or "")
    return found


@dataclass
class Answer:
    named: dict[str, list[str]]  # source -> the host keys it names
    said: dict[str, str]  # source -> one sentence of what it shows
    ranks: dict[str, list[int]]  # host key -> its suspect ranks
    stall_start: datetime | None

    @property
    def source(self) -> str | None:
        return next((s for s in SOURCES if self.named.get(s)), None)

    @property
    def culprits(self) -> list[str]:
        return self.named[self.source] if self.source else []

    @property
    def conflicts(self) -> dict[str, list[str]]:
        """Sources naming other hosts than the trusted one, and none of the same."""
        chosen = set(self.culprits)
        return {s: hosts for s, hosts in self.named.items() if hosts and s != self.source and not chosen & set(hosts)}

    @property
    def corroborated_by(self) -> list[str]:
        chosen = set(self.culprits)
        return [s for s, hosts in self.named.items() if s != self.source and chosen & set(hosts)]


def answer(evidence: Evidence, laggards: list[Laggards]) -> Answer:
    result = Answer({}, {}, defaultdict(list), None)
    starts: list[datetime] = []
    _from_flight_recorder(evidence, laggards, result, starts)
    _from_watchdogs(evidence, result, starts)
    _from_peer_errors(evidence, result, starts)
    _from_torchrun(evidence, result)
    _from_gpu_faults(evidence, result, starts)
    result.stall_start = min(starts, default=None)
    result.ranks = dict(result.ranks)
    return result


def _from_flight_recorder(evidence: Evidence, laggards: list[Laggards], result: Answer,
                          starts: list[datetime]) -> None:
    hosts: list[str] = []
    sentences = []
    for group in laggards:
        ranks = sorted(group.behind) + list(group.missing)
        for rank in ranks:
            host = evidence.rank_hosts.get(rank, f"rank {rank}")
            hosts.append(host)
            result.ranks[host].append(rank)
        behind = ", ".join(f"rank {r} at {s}" for r, s in sorted(group.behind.items()))
        missing = f"; no dump from rank(s) {', '.join(map(str, group.missing))}" if group.missing else ""
        op = f" ({group.stuck_op})" if group.stuck_op else ""
        sentences.append(f"process group {group.group}: {len(group.waiting_ranks)} rank(s) wait at collective "
                         f"{group.waiting_at}{op}; {behind or 'none behind'}{missing}")
        if group.stuck_since_ns:
            starts.append(datetime.fromtimestamp(group.stuck_since_ns / 1e9, UTC))
    if hosts:
        result.named[FLIGHT_RECORDER] = sorted(dict.fromkeys(hosts))
        result.said[FLIGHT_RECORDER] = "; ".join(sentences)


def _from_watchdogs(evidence: Evidence, result: Answer, starts: list[datetime]) -> None:
    if not evidence.watchdogs:
        return
    latest: dict[tuple[str | None, int], Watchdog] = {}
    for w in evidence.watchdogs:
        latest[(w.pg, w.rank)] = w  # events are oldest first: keep each rank's last timeout
    head: dict[str | None, int] = {}
    for (pg, _), w in latest.items():
        head[pg] = max(head.get(pg, 0), w.seq)
    behind = [w for (pg, _), w in latest.items() if w.seq < head[pg]]
    reporting = {w.host for w in latest.values() if w.host}
    starts += [w.time - timedelta(milliseconds=w.ran_ms) for w in latest.values()]
    first = min(latest.values(), key=lambda w: w.time)
    waited = f"{len(latest)} rank(s) timed out in {first.op} at collective {max(head.values())}"
    if behind:
        hosts = [w.host or f"rank {w.rank}" for w in behind]
        for w in behind:
            result.ranks[w.host or f"rank {w.rank}"].append(w.rank)
        result.named[WATCHDOG] = sorted(dict.fromkeys(hosts))
        result.said[WATCHDOG] = waited + "; behind them: " + ", ".join(
            f"rank {w.rank} at collective {w.seq}" for w in sorted(behind, key=lambda w: w.rank))
        return
    silent = sorted((set(evidence.rank_hosts.values()) | evidence.job_hosts) - reporting)
    if silent and len(silent) < len(reporting):
        for rank, host in evidence.rank_hosts.items():
            if host in silent:
                result.ranks[host].append(rank)
        result.named[WATCHDOG] = silent
        result.said[WATCHDOG] = waited + f"; no rank on {', '.join(silent)} timed out: it never joined"
    else:
        result.said[WATCHDOG] = waited + "; the logs do not show which rank never joined"


def _from_peer_errors(evidence: Evidence, result: Answer, starts: list[datetime]) -> None:
    if not evidence.peer_errors:
        return
    reporters: dict[str, set[str]] = defaultdict(set)
    for error in evidence.peer_errors:
        peer = host_key(error.peer)
        if peer:
            reporters[peer].add(host_key(error.reporter) or "?")
    counts = Counter({peer: len(who) for peer, who in reporters.items()})
    if not counts:
        return
    top = counts.most_common(1)[0][1]
    named = sorted(peer for peer, n in counts.items() if n == top)
    starts.append(min(e.time for e in evidence.peer_errors))
    summary = ", ".join(f"{peer} by {n} host(s)" for peer, n in counts.most_common(5))
    if len(named) == 1 or top >= 2:
        result.named[PEER_ERRORS] = named
        result.said[PEER_ERRORS] = f"{len(evidence.peer_errors)} NCCL/EFA peer error(s) name {summary}"
    else:
        result.said[PEER_ERRORS] = f"peer errors name different hosts once each ({summary}): no single peer"


def _gpu_fault(event: LogEvent) -> bool:
    if "CUDA error" in event.text:
        return True
    if "NVRM: Xid" not in event.text:
        return False
    grave = ACTION_ORDER.index("reset")
    return any(ACTION_ORDER.index(x.verdict.action) >= grave for x in parse_kernel_log(event.text, event.time))


def _from_gpu_faults(evidence: Evidence, result: Answer, starts: list[datetime]) -> None:
    if not evidence.gpu_faults:
        return
    hosts = sorted(evidence.gpu_faults)
    lines = [e for events in evidence.gpu_faults.values() for e in events]
    text = "; ".join(f"{h}: {evidence.gpu_faults[h][0].text.strip()[-160:]}" for h in hosts[:3])
    if len(hosts) == 1:
        result.named[GPU_FAULTS] = hosts
        for event in lines:
            if (rank := rank_prefix(event.text)) is not None:
                result.ranks[hosts[0]].append(rank)
        if not result.named.keys() - {GPU_FAULTS}:
            starts.append(min(e.time for e in lines))
    result.said[GPU_FAULTS] = f"{len(lines)} GPU fault line(s) on {len(hosts)} host(s): {text}"


def _from_torchrun(evidence: Evidence, result: Answer) -> None:
    causes = [c for c in evidence.root_causes if host_key(c.host)]
    if not causes:
        return
    first = min(c.time for c in causes)
    earliest = {host_key(c.host) or "" for c in causes if c.time <= first + timedelta(seconds=1)}
    text = "; ".join(f"rank {c.rank} on {c.host} exited {c.exitcode}" for c in causes[:4])
    if len(earliest) == 1:
        result.named[TORCHRUN] = sorted(earliest)
        for c in causes:
            if host_key(c.host) in earliest and c.rank is not None:
                result.ranks[host_key(c.host) or ""].append(c.rank)
    result.said[TORCHRUN] = f"torchrun's first observed failure: {text}"
