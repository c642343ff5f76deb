"""Who hung the job: each source's answer, the strongest one, and where the others disagree.

Sources in the order they are trusted: the flight recorder (the ranks that never enqueued the collective the
others wait at), the NCCL watchdog (ranks that timed out at an earlier collective, or a host none of whose ranks
timed out while the others' did), peer errors (the host the most other hosts say dropped them), torchrun's
"Root Cause" (the first rank that exited), and last the GPU faults in the logs (a rank's ``CUDA error`` or a
kernel Xid whose catalogue action is a GPU reset or worse), when exactly one host has them. Every name a line
gives a node is resolved first (:class:`NodeKeys`, through the engine's node identities), so torchrun's
``ip-10-0-0-4``, aws-ofi-nccl's ``Peer host id: i-...`` and a Fluent Bit record's node name of the same node are
one suspect, and sources agree or disagree about nodes, never about spellings.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from fmdoctor.engine.identity import NodeIdentities, canonical
from fmdoctor.node.xid import parse_kernel_log
from fmdoctor.node.xid_catalogue import ACTION_ORDER
from fmdoctor.training.flight_recorder import Laggards
from fmdoctor.training.logs import LogEvent, stream_kind
from fmdoctor.training.signatures import (
    DumpSignal,
    PeerError,
    RootCause,
    Watchdog,
    line_rank,
    parse_dump_signal,
    parse_peer_error,
    parse_root_causes,
    parse_watchdog,
)

FLIGHT_RECORDER, WATCHDOG, PEER_ERRORS, TORCHRUN = "flight-recorder", "nccl-watchdog", "peer-errors", "torchrun"
GPU_FAULTS = "gpu-faults"
SOURCES = (FLIGHT_RECORDER, WATCHDOG, PEER_ERRORS, TORCHRUN, GPU_FAULTS)
READABLE = {FLIGHT_RECORDER: "the NCCL flight recorder dumps", WATCHDOG: "the NCCL watchdog timeouts",
            PEER_ERRORS: "NCCL/EFA peer errors", TORCHRUN: "torchrun's failure summary",
            GPU_FAULTS: "the GPU faults in its logs"}


def host_key(name: str | None) -> str | None:
    """A name's spelling when no inventory knows it: 'ip-10-0-1-23.us-west-2.compute.internal', 'ip-10-0-1-23' and
    '10.0.1.23' are one node (:func:`fmdoctor.engine.identity.canonical`)."""
    return canonical(name)


class NodeKeys:
    """One key per node, whatever name a line gives it: the instance id the cluster's identity resolver finds for
    the name; else, for a node no inventory lists (a HyperPod node), the instance id the job's own log streams tie
    its host name to (``<host>.<instance id>.<log>``, a stream ending in the id); else the name's canonical form."""

    def __init__(self, identities: NodeIdentities | None = None,
                 streams: Mapping[str, tuple[str | None, str | None]] | None = None):
        self.identities = identities
        self.links: dict[str, str] = {}
        self.links = _links(self, streams or {})

    def __call__(self, name: str | None) -> str | None:
        if not name or not name.strip():
            return None
        if self.identities is not None:
            match = self.identities.resolve(name, suggest_close=False)
            if match.instance is not None:
                return match.instance.id
        form = canonical(name)
        return self.links.get(form, form) if form else None

    def of(self, event: LogEvent) -> str | None:
        """The node that wrote a line: the instance id its stream carries decides over its host name."""
        return self(event.instance_id) or self(event.host)


def _links(keys: NodeKeys, streams: Mapping[str, tuple[str | None, str | None]]) -> dict[str, str]:
    """Host name -> the node its streams tie it to. A name several instances' streams carry (ParallelCluster
    replaces a static node under the same Slurm name; the old instance's streams stay) is the one the inventory
    lists; where it lists none or several of them, the name stays a name rather than one picked at random."""
    candidates: dict[str, set[str]] = {}
    for host, instance in streams.values():
        host_form, node = canonical(host), keys(instance)
        if host_form and node and host_form != node:
            candidates.setdefault(host_form, set()).add(node)
    known = keys.identities.nodes if keys.identities is not None else {}
    links = {}
    for host_form, nodes in candidates.items():
        live = {n for n in nodes if n in known} if len(nodes) > 1 else nodes
        if len(live) == 1:
            links[host_form] = next(iter(live))
    return links


@dataclass
class Evidence:
    """What the logs said, parsed once; every host in it is a :class:`NodeKeys` key."""

    watchdogs: list[Watchdog] = field(default_factory=list)
    signals: list[DumpSignal] = field(default_factory=list)  # ranks' own "Last enqueued NCCL work" lines
    peer_errors: list[PeerError] = field(default_factory=list)
    root_causes: list[RootCause] = field(default_factory=list)  # torchrun's root causes
    other_failures: list[RootCause] = field(default_factory=list)  # torchrun's Failures sections
    finished: list[LogEvent] = field(default_factory=list)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    rank_sources: dict[int, str] = field(default_factory=dict)  # rank -> the line that mapped it to its host
    hosts: dict[str, str | None] = field(default_factory=dict)  # host key -> instance id, where a stream says
    job_hosts: set[str] = field(default_factory=set)  # hosts with a stream like those that logged a timeout (not proof)
    gpu_faults: dict[str, list[LogEvent]] = field(default_factory=dict)  # host key -> CUDA error / grave Xid lines
    keys: NodeKeys = field(default_factory=NodeKeys)
    run_since: datetime | None = None  # where the run that hung begins to time out (None: no watchdog line)
    job: str | None = None  # the job that hung, where its lines say which (see of_the_hung_job)
    other_jobs: list[str] = field(default_factory=list)  # jobs sharing the log groups whose lines were left out
    _mappings: list[tuple[datetime | None, int, str, str]] = field(default_factory=list)

    @property
    def failures(self) -> bool:
        return bool(self.watchdogs or self.peer_errors or self.root_causes)

    def last_failure(self) -> datetime | None:
        times = [w.time for w in self.watchdogs] + [p.time for p in self.peer_errors]
        times += [r.time for r in self.root_causes]
        return max(times, default=None)

    def waiting_points(self) -> dict[str, int]:
        """Per process group the watchdog named (its description or GUID), the collective its ranks timed out in."""
        points: dict[str, int] = {}
        for w in self.watchdogs:
            if w.pg is not None:
                points[w.pg] = max(points.get(w.pg, 0), w.seq)
        return points

    def map_rank(self, rank: int | None, host: str | None, how: str, time: datetime | None = None) -> None:
        if rank is not None and host:
            self._mappings.append((time, rank, host, how))

    def _settle_ranks(self, since: datetime | None, early: datetime | None) -> None:
        """Each rank's host: the first line of the run that hung that maps it (from ``since`` on), else the first
        from the timeout before it (``early``: the same run's earlier lines); an earlier run's lines map nothing."""
        tiers = [[m for m in self._mappings if since is None or (m[0] is not None and m[0] >= since)]]
        if since is not None and early is not None:
            tiers.append([m for m in self._mappings if m[0] is not None and early <= m[0] < since])
        for tier in tiers:
            for _, rank, host, how in tier:
                if rank not in self.rank_hosts:
                    self.rank_hosts[rank] = host
                    self.rank_sources[rank] = how


def read_evidence(events: list[LogEvent], streams: dict[str, tuple[str | None, str | None]],
                  keys: NodeKeys | None = None, node_jobs: Mapping[str, str] | None = None) -> Evidence:
    """Parse what the job wrote; ``streams`` (every stream of the groups, with its host) tells which nodes write
    the same kind of output as those whose ranks timed out. Ranks are mapped to hosts by every line that names
    its rank: the ``[rankN]:`` prefix of any line, the heartbeat monitor's lines (the hung rank's own), the
    watchdog's, and every entry of torchrun's report (its Failures section as well as its root cause). Another
    job's lines in the same groups are left out first (:func:`of_the_hung_job`; ``node_jobs``: node key -> the
    scheduler's job running on it)."""
    keys = keys or NodeKeys(None, streams)
    found = Evidence(keys=keys)
    events, found.job, found.other_jobs = of_the_hung_job(events, keys, node_jobs or {})
    for host, instance in streams.values():
        if (key := keys(instance) or keys(host)) is not None:
            found.hosts.setdefault(key, instance)
    timed_out_kinds: set[str] = set()
    by_stream: dict[tuple[str, str], list[LogEvent]] = defaultdict(list)
    for event in events:
        key = keys.of(event)
        if key:
            found.hosts.setdefault(key, event.instance_id)
        by_stream[(event.group, event.stream)].append(event)
        found.map_rank(line_rank(event.text), key, "its own lines", event.time)
        if (watchdog := parse_watchdog(event.text, key, event.time)) is not None:
            found.watchdogs.append(watchdog)
            timed_out_kinds.add(stream_kind(event.stream))
            found.map_rank(watchdog.global_rank, key, "its watchdog timeout", event.time)
        elif (signal := parse_dump_signal(event.text, key, event.time)) is not None:
            found.signals.append(signal)
        elif (peer := parse_peer_error(event.text, event.instance_id or event.host, event.time)) is not None:
            found.peer_errors.append(peer)
        elif "worker group successfully finished" in event.text:
            found.finished.append(event)
        elif key and _gpu_fault(event):
            found.gpu_faults.setdefault(key, []).append(event)
    for stream_events in by_stream.values():
        reporter = keys.of(stream_events[0])
        for entry in parse_root_causes([(e.time, e.text) for e in stream_events], reporter):
            (found.root_causes if entry.root else found.other_failures).append(entry)
            found.map_rank(entry.rank, keys(entry.host), "torchrun's report", entry.time)
    _keep_the_run_that_hung(found)
    found.job_hosts = {key for stream, (host, instance) in streams.items()
                       if stream_kind(stream) in timed_out_kinds and (key := keys(instance) or keys(host))}
    return found


# torch elastic's log directory for a run: tempfile.mkdtemp(prefix=f"{run_id}_") under a "torchelastic_" one
# (torch/distributed/elastic/agent/server/local_elastic_agent.py, _make_log_dir), which torchrun's report prints as
# each failure's error_file: /tmp/torchelastic_sio2pi4d/<run id>_cejtyodz/attempt_0/0/error.json. The run id is
# --rdzv-id (often $SLURM_JOB_ID); torchrun's default, "none", tells no run from another.
_RUN_DIR = re.compile(r"error_file\s*:\s*\S*/torchelastic_[^/\s]+/(?P<run>[^/\s]+)_[a-z0-9_]{8}/attempt_\d+/")


def run_id(text: str) -> str | None:
    """The torchrun run id an ``error_file:`` line of its report carries, else None."""
    match = _RUN_DIR.search(text)
    return match["run"] if match and match["run"] != "none" else None


def of_the_hung_job(events: list[LogEvent], keys: NodeKeys, node_jobs: Mapping[str, str]
                    ) -> tuple[list[LogEvent], str | None, list[str]]:
    """The lines of the job that hung, when several jobs write to the same log groups (a ParallelCluster log
    identifier every job's nodes share, a Container Insights group of every pod): (its lines, its job, the other
    jobs). A line's job is what it says itself (a pod's job labels in its Fluent Bit record; torchrun's run id in
    its report's error_file), else the one job the other lines of its node name; where no line names its job,
    the one job the scheduler runs on its node (``node_jobs``: Slurm's ids are another naming than run ids, so
    the two are never mixed). The job that hung is the newest watchdog timeout's; a line of another job is left
    out. With no job to tell, every line is kept."""
    job_of: dict[int, str | None] = {id(e): e.job or run_id(e.text) for e in events}
    if not any(job_of.values()):
        job_of = {id(e): node_jobs.get(node) if (node := keys.of(e)) else None for e in events}
    by_node: dict[str, set[str]] = defaultdict(set)
    for event in events:
        node, job = keys.of(event), job_of[id(event)]
        if node and job:
            by_node[node].add(job)
    for event in events:
        if job_of[id(event)] is None and (node := keys.of(event)) and len(named := by_node.get(node, set())) == 1:
            job_of[id(event)] = next(iter(named))
    _unnamed_job(events, keys, job_of)
    timeouts = [e for e in events if parse_watchdog(e.text, None, e.time) is not None]
    hung = job_of[id(max(timeouts, key=lambda e: e.time))] if timeouts else None
    jobs = {j for j in job_of.values() if j}
    if hung is None or len(jobs) < 2:
        return events, hung, []
    kept = [e for e in events if job_of[id(e)] in (hung, None)]
    return kept, (None if hung == _UNNAMED else hung), sorted(jobs - {hung})


_UNNAMED = "(a job that names no run)"  # no run id can be this: it has spaces and parentheses


def _unnamed_job(events: list[LogEvent], keys: NodeKeys, job_of: dict[int, str | None]) -> None:
    """Where one job names itself (its run id, its pods' labels) and another does not (torchrun's default run id
    'none', a pod without job labels), the nodes whose lines name no job are another job's when a rank timed out
    on one of them and the same rank on a node of the named job: one rank is one process, on one node. Their lines
    are then that unnamed job's (so the hung job's lines are kept and the other's left out, whichever hung)."""
    named = {j for j in job_of.values() if j}
    if len(named) != 1:
        return
    ranks: dict[bool, dict[int, str]] = {True: {}, False: {}}  # named job's node? -> rank -> node
    for event in events:
        node = keys.of(event)
        watchdog = parse_watchdog(event.text, None, event.time)
        if node and watchdog is not None and watchdog.global_rank is not None:
            ranks[job_of[id(event)] is not None][watchdog.global_rank] = node
    clash = set(ranks[True]) & set(ranks[False])
    if not any(ranks[True][r] != ranks[False][r] for r in clash):
        return
    for event in events:
        if job_of[id(event)] is None and keys.of(event) is not None:
            job_of[id(event)] = _UNNAMED


def _keep_the_run_that_hung(found: Evidence) -> None:
    """Drop an earlier run's lines (a torch elastic restart, a requeued job, HyperPod's auto-resume onto a new
    node): other collective counters (SeqNum starts again at 0) and another placement of ranks on nodes.

    The run that hung is the newest watchdog's: each rank times out one ``Timeout(ms)`` after it enqueued the
    collective, and the first timeout tears the job down, so every timeout of one hang falls within one timeout
    before the newest, and a later run's first timeout comes a whole timeout after it started, after the earlier
    run's lines. Timeouts, dump signals and torchrun's reports count from there; a GPU fault, a peer error and a
    rank's placement may come up to one more timeout earlier (the fault that hung the rank, the steps before)."""
    if not found.watchdogs:
        found._settle_ranks(None, None)
        return
    newest = max(found.watchdogs, key=lambda w: w.time)
    span = timedelta(milliseconds=newest.timeout_ms)
    since, early = newest.time - span, newest.time - 2 * span
    found.run_since = since
    found.watchdogs = [w for w in found.watchdogs if w.time >= since]
    found.signals = [s for s in found.signals if s.time >= since]
    found.root_causes = [r for r in found.root_causes if r.time >= since]
    found.other_failures = [r for r in found.other_failures if r.time >= since]
    found.peer_errors = [p for p in found.peer_errors if p.time >= early]
    found.gpu_faults = {host: kept for host, lines in found.gpu_faults.items()
                        if (kept := [e for e in lines if e.time >= early])}
    found._settle_ranks(since, early)


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


def answer(evidence: Evidence, laggards: list[Laggards], label: Callable[[str], str] = str) -> Answer:
    """Each source's culprits (host keys) and one sentence of what it shows; ``label`` names a host key for
    people (the check's 'gpu-node-2 (i-0abc...)')."""
    result = Answer({}, {}, defaultdict(list), None)
    starts: list[datetime] = []
    _from_flight_recorder(evidence, laggards, result, starts, label)
    _from_watchdogs(evidence, result, starts, label)
    _from_peer_errors(evidence, result, starts, label)
    _from_torchrun(evidence, result)
    _from_gpu_faults(evidence, result, starts, label)
    result.stall_start = min(starts, default=None)
    result.ranks = dict(result.ranks)
    return result


def _from_flight_recorder(evidence: Evidence, laggards: list[Laggards], result: Answer,
                          starts: list[datetime], label: Callable[[str], str]) -> None:
    """The ranks that never reached the collective the others are stuck in, and the node each runs on."""
    hosts: list[str] = []
    sentences = []
    for group in laggards:
        ranks = sorted(group.behind) + list(group.missing)
        where = []
        for rank in ranks:
            host = evidence.rank_hosts.get(rank)
            hosts.append(host or f"rank {rank}")
            result.ranks[host or f"rank {rank}"].append(rank)
            last = f", its last {group.behind[rank]}" if rank in group.behind else ", no dump"
            where.append(f"rank {rank} on {label(host) if host else 'an unknown node'}{last}")
        name = f"{group.group} ({group.desc})" if group.desc and group.desc != group.group else group.group
        op = f" ({group.stuck_op})" if group.stuck_op else ""
        sentences.append(f"process group {name}: {len(group.waiting_ranks)} rank(s) wait in collective "
                         f"{group.waiting_at}{op}; never reached it: {'; '.join(where)}")
        if group.stuck_since_ns:
            starts.append(datetime.fromtimestamp(group.stuck_since_ns / 1e9, UTC))
    if hosts:
        result.named[FLIGHT_RECORDER] = sorted(dict.fromkeys(hosts))
        result.said[FLIGHT_RECORDER] = "; ".join(sentences)


def _head_of(heads: Mapping[str | None, int], pg: str | None) -> int | None:
    if pg in heads:
        return heads[pg]
    return heads.get(None) if pg in (None, "default_pg", "0") else None


def _from_watchdogs(evidence: Evidence, result: Answer, starts: list[datetime],
                    label: Callable[[str], str]) -> None:
    """Ranks that timed out at an earlier collective than the others of their group; ranks whose own dump-signal
    line says their last enqueued collective is below the one the group timed out in (they never reached it);
    else a host whose ranks (mapped by this run's lines) all stayed silent while the others' timed out."""
    if not evidence.watchdogs:
        return
    latest: dict[tuple[str | None, int], Watchdog] = {}
    for w in evidence.watchdogs:
        latest[(w.pg, w.rank)] = w  # events are oldest first: keep each rank's last timeout
    head: dict[str | None, int] = {}
    for (pg, _), w in latest.items():
        head[pg] = max(head.get(pg, 0), w.seq)
    behind: list[tuple[int, str | None, str]] = [
        (w.rank, w.host, f"rank {w.rank} timed out at collective {w.seq}")
        for (pg, _), w in latest.items() if w.seq < head[pg]]
    signals: dict[tuple[str | None, int], DumpSignal] = {}
    for signal in evidence.signals:
        if signal.timed_out is None:  # a rank whose own watchdog timed out is judged by its timeout above
            signals[(signal.pg, signal.rank)] = signal
    for (pg, rank), signal in sorted(signals.items(), key=lambda item: item[0][1]):
        seq = _head_of(head, pg)
        if seq is not None and signal.last_enqueued < seq and (pg, rank) not in latest:
            host = signal.host or evidence.rank_hosts.get(rank)
            behind.append((rank, host, f"rank {rank} on {label(host) if host else 'an unknown node'} never "
                                       f"enqueued it (its last enqueued NCCL work: {signal.last_enqueued})"))
    reporting = {w.host for w in latest.values() if w.host}
    starts += [w.time - timedelta(milliseconds=w.ran_ms) for w in latest.values()]
    first = min(latest.values(), key=lambda w: w.time)
    waited = f"{len(latest)} rank(s) timed out in {first.op} at collective {max(head.values())}"
    if behind:
        for rank, host, _ in behind:
            result.ranks[host or f"rank {rank}"].append(rank)
        result.named[WATCHDOG] = sorted(dict.fromkeys(host or f"rank {rank}" for rank, host, _ in behind))
        result.said[WATCHDOG] = waited + "; behind them: " + ", ".join(text for _, _, text in sorted(behind))
        return
    # A host is in the job when a line of this run maps one of its ranks; a stream like the job's is no proof (another
    # job's nodes log to the same log identifier), so such hosts are only counted, never named.
    silent = sorted(set(evidence.rank_hosts.values()) - reporting)
    unproven = evidence.job_hosts - reporting - set(silent)
    if silent and len(silent) < len(reporting):
        for rank, host in evidence.rank_hosts.items():
            if host in silent:
                result.ranks[host].append(rank)
        result.named[WATCHDOG] = silent
        result.said[WATCHDOG] = waited + f"; no rank on {', '.join(label(h) for h in silent)} timed out: it never " \
                                         "joined"
    else:
        result.said[WATCHDOG] = waited + "; the logs do not show which rank never joined" + (
            f" ({len(unproven)} other host(s) with streams like the job's logged no timeout, but no line ties them "
            "to this job)" if unproven else "")


def _from_peer_errors(evidence: Evidence, result: Answer, starts: list[datetime],
                      label: Callable[[str], str] = str) -> None:
    if not evidence.peer_errors:
        return
    reporters: dict[str, set[str]] = defaultdict(set)
    for error in evidence.peer_errors:
        peer = evidence.keys(error.peer)
        if peer:
            reporters[peer].add(evidence.keys(error.reporter) or "?")
    counts = Counter({peer: len(who) for peer, who in reporters.items()})
    if not counts:
        return
    top = counts.most_common(1)[0][1]
    named = sorted(peer for peer, n in counts.items() if n == top)
    starts.append(min(e.time for e in evidence.peer_errors))
    summary = ", ".join(f"{label(peer)} by {n} host(s)" for peer, n in counts.most_common(5))
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


def _from_gpu_faults(evidence: Evidence, result: Answer, starts: list[datetime],
                     label: Callable[[str], str] = str) -> None:
    if not evidence.gpu_faults:
        return
    hosts = sorted(evidence.gpu_faults)
    lines = [e for events in evidence.gpu_faults.values() for e in events]
    text = "; ".join(f"{label(h)}: {evidence.gpu_faults[h][0].text.strip()[-160:]}" for h in hosts[:3])
    if len(hosts) == 1:
        result.named[GPU_FAULTS] = hosts
        for event in lines:
            if (rank := line_rank(event.text)) is not None:
                result.ranks[hosts[0]].append(rank)
        if not result.named.keys() - {GPU_FAULTS}:
            starts.append(min(e.time for e in lines))
    result.said[GPU_FAULTS] = f"{len(lines)} GPU fault line(s) on {len(hosts)} host(s): {text}"


def _from_torchrun(evidence: Evidence, result: Answer) -> None:
    keyed = [(c, evidence.keys(c.host)) for c in evidence.root_causes]
    causes = [(c, key) for c, key in keyed if key]
    if not causes:
        return
    first = min(c.time for c, _ in causes)
    earliest = {key for c, key in causes if c.time <= first + timedelta(seconds=1)}
    text = "; ".join(f"rank {c.rank} on {c.host} exited {c.exitcode}" for c, _ in causes[:4])
    if len(earliest) == 1:
        result.named[TORCHRUN] = sorted(earliest)
        for c, key in causes:
            if key in earliest and c.rank is not None:
                result.ranks[key or ""].append(c.rank)
    result.said[TORCHRUN] = f"torchrun's first observed failure: {text}"
