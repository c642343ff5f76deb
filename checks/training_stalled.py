from __future__ import annotations

import shlex
from typing import Any

from fmdoctor.checkpoints.facts import CHECKPOINT_FACTS
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import ACCELERATOR_METRICS, EFA_METRICS, Check, NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.gaps import Gaps
from fmdoctor.engine.identity import HYPERPOD_GROUP_TAG, NodeIdentities, canonical
from fmdoctor.engine.inventory import HYPERPOD, INSTANCES, Instance
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.training.culprit import READABLE, Answer, Evidence, NodeKeys, answer, read_evidence
from fmdoctor.training.flight_recorder import find_laggards, of_the_run
from fmdoctor.training.logs import LOG_GROUPS, JobLogs, discover_groups, is_signature, read_job_logs

from ._common import hyperpod_nodes_of
from ._scheduler import jobs_by_node, map_ranks_by_job
from ._training import (
    Activity,
    Progress,
    checkpoint_progress,
    cross_reference,
    explains,
    flight_recorder_dumps,
    job_activity,
    metrics_unread,
    node_xids,
)
from ._training import training_iam as _iam
from .efa_errors import EfaErrors
from .hyperpod_node_unhealthy import HyperpodNodeUnhealthy
from .spot_interruption import SpotInterruption

LOGS_KEY = "training.logs"
PARALLELCLUSTER_GROUPS = "/aws/parallelcluster/"
HOW_TO_SEE_LOGS = ("ship the job's stdout/stderr to CloudWatch Logs (ParallelCluster: Monitoring/Logs/CloudWatch "
                   "plus an agent entry for the job's output files; EKS: Container Insights' Fluent Bit) or set "
                   "training.log_groups, and allow logs:DescribeLogGroups and logs:FilterLogEvents")


class TrainingStalled(Check):
    """The cluster's training job is still making progress (or finished): its newest usable checkpoint is within
    training.interval_factor of its usual interval, its logs (training.log_groups or the ParallelCluster,
    HyperPod and Container Insights log groups) hold no NCCL watchdog timeout, peer error or torchrun failure
    since then, and its flight-recorder dumps (training.flight_recorder) show no rank behind the others.

    When it stalled, the finding names the node(s) that hung it and how: the ranks PyTorch's NCCL flight recorder
    shows never reaching the collective the others wait at (torch/csrc/distributed/c10d/FlightRecorder.hpp),
    else the watchdog's "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=...)" lines
    (ProcessGroupNCCL.cpp), else the host NCCL's "Connection closed by remote peer" (NVIDIA/nccl
    src/misc/socket.cc) and libfabric EFA's "Peer host id" (aws-ofi-nccl) point at, else torchrun's "Root Cause
    (first observed failure)" (torch/distributed/elastic/multiprocessing/errors), else the one host whose logs
    show a CUDA error or an Xid NVIDIA's catalogue resolves by a reset or worse; then what explains it: an Xid
    (NVIDIA's Xid catalogue), EFA error counters, a Spot interruption, a failed HyperPod node. Ranks map to hosts by
    every line that names its writer (the hung rank's own heartbeat-monitor lines, torchrun's whole report), and
    every name is resolved to its node first (fmdoctor.engine.identity), so sources agree or conflict about
    nodes; conflicting sources propose no fix. Another job writing to the same log groups is told apart by its
    pods' job labels, torchrun's run id (its report's error_file) or Slurm's job on each node, and left out.

    With no log group, a checkpoint within its usual interval and no rank behind in the dumps are proof of
    progress (nothing to name); the missing logs are reported as not verified when a stall's culprit cannot be
    named or no checkpoint shows progress. With no checkpoint location and silent logs the GPU metrics decide:
    tensor work (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) is a job computing; every busy GPU without it while EFA moves
    no RDMA bytes (node_amazonefa_rdma_*_bytes, where published) is ranks spinning in a hung collective.
    """

    id = "training-stalled"
    family = "training"
    concerns = frozenset({JOB, NODE})
    severity = Severity.CRITICAL
    iam_actions = _iam(EfaErrors, SpotInterruption, HyperpodNodeUnhealthy)
    inventory = frozenset({INSTANCES, HYPERPOD})  # a HyperPod cluster's nodes are no EC2 instances of the account
    prefetch = (*EfaErrors.prefetch, *SpotInterruption.prefetch, LOG_GROUPS, CHECKPOINT_FACTS)
    metrics = frozenset({ACCELERATOR_METRICS, EFA_METRICS})  # GPU activity (spin) and the EFA cross-reference

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        running = [i for i in inv.accelerated_nodes() if i.state == "running"]
        hyperpod = inv.hyperpod.name if inv.hyperpod else ctx.settings.hyperpod.cluster_name
        if not running and not hyperpod:
            raise NotApplicable("no running GPU/Neuron compute node or HyperPod cluster: no training job to judge")
        progress = None
        with ctx.guard("the job's checkpoint progress"):
            progress = checkpoint_progress(ctx)
        logs = ctx.shared(LOGS_KEY, lambda: load_logs(ctx, hyperpod))
        logs.gaps.report(ctx)
        dump_gaps = Gaps()
        dumps = flight_recorder_dumps(ctx, dump_gaps)
        dump_gaps.report(ctx)
        identities = _identities(ctx, hyperpod)
        keys = NodeKeys(identities, logs.streams)
        evidence = read_evidence(logs.events, logs.streams, keys, jobs_by_node(ctx, keys))
        dumps, earlier_dumps = of_the_run(dumps, evidence.run_since)  # another hang's dumps under the same prefix
        laggards = find_laggards(dumps, evidence.waiting_points())
        # Ranks no log line places, placed by the Slurm job's node list where that layout is proven (scheduler).
        named = {w.rank for w in evidence.watchdogs} | {s.rank for s in evidence.signals} | {
            r for lag in laggards for r in (*lag.behind, *lag.missing)}
        for rank, (host, how) in map_ranks_by_job(ctx, named, evidence.rank_hosts, evidence.keys).items():
            evidence.map_rank(rank, host, how)
        # Without logs a fresh checkpoint (and no rank behind in the dumps) still proves the job makes progress;
        # the logs are missed only where a stall needs its culprit named or nothing else shows progress.
        if not logs.groups and (progress is None or progress.stale or laggards):
            ctx.unverified("which node hung the training job (its logs)", "NoLogGroup",
                           f"no log group found (looked for {', '.join(logs.looked_for)}): {HOW_TO_SEE_LOGS}")
        talking = [e for e in logs.recent if not is_signature(e.text)]
        since = progress.written if progress else None
        failed_since = bool(laggards) or (evidence.failures and (since is None or
                                                                  (evidence.last_failure() or since) > since))
        if evidence.finished and not failed_since and (since is None or evidence.finished[-1].time >= since):
            return []  # torch elastic's agents reported the worker group finished
        # With no checkpoint to go by and silent logs, the GPUs decide: spinning in a collective everywhere (and
        # no RDMA traffic) is a stall; tensor work is a job computing.
        gpus_decide = not failed_since and progress is None and not talking
        activity = job_activity(ctx) if gpus_decide else None
        spinning = activity is not None and activity.stalled
        if not failed_since and not spinning and (progress is None or not progress.stale or talking):
            unread = metrics_unread(ctx) if progress is None and activity is None else None
            if progress is None and not logs.readable and not dumps and activity is None:
                if unread:  # recorded here too: under --only training-stalled no GPU check reports it
                    ctx.unverified("whether the job's GPUs still do tensor work", unread[0],
                                   f"the GPU metrics could not be read: {unread[1]}")
                raise Unverified("neither checkpoints, logs, flight-recorder dumps nor GPU metrics could be read")
            if progress is None and not talking and activity is None:
                gpus = (f"the GPU metrics could not be read ({unread[0]}: {unread[1]})" if unread
                        else "no GPU publishes tensor activity (DCGM)")
                ctx.unverified("whether the training job still makes progress", "NoProgressSignal",
                               "its logs are silent, no checkpoint location is configured (checkpoints.locations) "
                               f"and {gpus}: " + HOW_TO_SEE_LOGS)
            return []
        found = answer(evidence, laggards, lambda key: _label(identities, key))
        return [self._finding(ctx, progress, logs, evidence, found, len(dumps), talking,
                              activity if gpus_decide else job_activity(ctx), identities, earlier_dumps)]

    def _finding(self, ctx: CheckContext, progress: Progress | None, logs: JobLogs, evidence: Evidence,
                 found: Answer, dumps: int, talking: list[Any], activity: Activity | None,
                 identities: NodeIdentities, earlier_dumps: int = 0) -> Finding:
        xids = node_xids(logs.events, ctx.now, evidence.keys)
        suspects = []
        for key in found.culprits:  # host keys: the instance id wherever a name resolved to one
            instance = ctx.inventory.instance(key)  # an EC2 instance of the account (not a HyperPod node)
            # a HyperPod node only when ListClusterNodes lists it: an id the logs name (an EFA peer) may be a node
            # HyperPod already replaced or another cluster's, and HyperPod's fix goes to the cluster's nodes only
            listed = identities.nodes.get(key)
            hyperpod_id = key if instance is None and listed is not None and listed.tags.get(HYPERPOD_GROUP_TAG) \
                else None
            suspects.append((key, instance, hyperpod_id))
        facts, not_checked = cross_reference(ctx, [i for _, i, _ in suspects if i],
                                             [h for _, _, h in suspects if h])
        slurm = any(g.startswith(PARALLELCLUSTER_GROUPS) for g in logs.groups)
        hostnames = _hostnames(evidence.keys)
        culprits = [self._culprit(ctx, key, instance, hyperpod_id, found, xids, facts, slurm, identities,
                                  hostnames.get(key, []))
                    for key, instance, hyperpod_id in suspects]
        conflicts = found.conflicts
        if conflicts:  # sources that disagree about the node: nothing is taken out on them
            for culprit in culprits:
                culprit.pop("fix", None)
                culprit["take_out"] = None
        start = found.stall_start or (progress.written if progress else None)
        when = (f" since about {start.isoformat(timespec='minutes')} ({format_duration(ctx.now - start)} ago)"
                if start else "")
        who = "; ".join(c["summary"] for c in culprits) if culprits else (
            "the culprit is not named: " + ("no rank-level evidence in the logs" if logs.readable
                                            else "its logs could not be read"))
        disagree = ("; the evidence conflicts, so no fix is proposed: " + ", ".join(
            f"{s} names {', '.join(_label(identities, h) for h in hosts)}" for s, hosts in conflicts.items())
            if conflicts else "")
        resume = f" Resume from {progress.uri}." if progress else ""
        spin = (f"; every busy GPU ({len(activity.judged)} node(s)) ran kernels without tensor work over the last "
                f"{activity.window}" + (" and EFA moved no RDMA bytes" if activity.rdma_bytes == 0 else "")
                + ": ranks spinning in a collective" if activity is not None and activity.stalled else "")
        suspect_ranks = {r for ranks in found.ranks.values() for r in ranks}
        evidence_out: dict[str, Any] = {
            "stall_start": start.isoformat(timespec="seconds") if start else None,
            "culprits": culprits,
            "named_by": found.source,
            "corroborated_by": found.corroborated_by,
            "conflicting": bool(conflicts),
            "conflicts": conflicts,
            "read_next": _read_next(found, conflicts, logs, dumps) if conflicts else [],
            "rank_hosts": {str(r): {"host": h, "mapped_by": evidence.rank_sources.get(r)}
                           for r, h in sorted(evidence.rank_hosts.items()) if r in suspect_ranks},
            "sources": found.said,
            "checkpoint": progress.evidence() if progress else None,
            "logs": {"groups": logs.groups, "failure_lines": len(logs.events), "lines_in_silence_window": len(talking),
                     "silence": format_duration(ctx.settings.training.silence), "truncated": logs.truncated},
            "flight_recorder": {"dumps": dumps, "prefixes": list(ctx.settings.training.flight_recorder),
                                "earlier_dumps_left_out": earlier_dumps},
            "gpu_activity": activity.evidence() if activity else None,
            "not_checked": not_checked,
        }
        fixes = [c.pop("fix") for c in culprits if "fix" in c]
        if fixes and not conflicts:
            evidence_out["fix"] = fixes
        hang = bool(found.said) or found.stall_start is not None
        return self.finding(
            resource=(culprits[0]["instance"] or culprits[0]["host"]) if culprits else ctx.cluster,
            summary=f"Training on {ctx.cluster} stalled{when}: {who}{disagree}{spin}.{resume}",
            evidence=evidence_out,
            severity=Severity.CRITICAL if hang else Severity.WARNING,
        )

    def _culprit(self, ctx: CheckContext, key: str, instance: Instance | None, hyperpod_id: str | None,
                 found: Answer, xids: dict[str, list[dict[str, Any]]], facts: dict[str, dict[str, Any]],
                 slurm: bool, identities: NodeIdentities, hostnames: list[str]) -> dict[str, Any]:
        node_id = instance.id if instance else hyperpod_id
        known = facts.get(node_id or "", {})
        node_xid = xids.get(key, [])  # keyed like the culprit, whatever name the Xid's stream used
        reasons = []
        if explains(node_xid):
            x = node_xid[0]
            reasons.append(f"Xid {x['xid']} ({x['meaning']}) at {x['time']}")
        if "hyperpod_status" in known and not known["hyperpod_status"].startswith("Running"):
            reasons.append(f"HyperPod status {known['hyperpod_status']}")
        if "spot_interruption" in known:
            reasons.append(known["spot_interruption"])
        if known.get("efa_errors"):
            reasons.append("EFA errors " + ", ".join(f"{v:g} {k}" for k, v in known["efa_errors"].items()))
        label = _label(identities, key)
        ranks = sorted(set(found.ranks.get(key, [])))
        rank_text = f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})" if ranks else ""
        explained = f", explained by {reasons[0]}" if reasons else ", nothing else fmdoctor reads explains it"
        host = (canonical(instance.private_dns or instance.private_ip) if instance else None) or key
        out: dict[str, Any] = {
            "host": host, "instance": node_id,
            "names": list(identities.names(node_id)) if instance and node_id else [], "ranks": ranks,
            "xids": node_xid[:5], **known,
            "explained_by": reasons[0] if reasons else None, "take_out": None,
            "summary": f"{label}{rank_text}, named by {READABLE[found.source or '']}{explained}",
        }
        out.update(_take_out(ctx, key, instance, hyperpod_id, node_xid, slurm, hostnames))
        return out


def _hostnames(keys: NodeKeys) -> dict[str, list[str]]:
    """Per node, the host names its own log streams give it that are no EC2 hostname (ParallelCluster's Slurm
    hostnames, queue1-st-p4d-2: the Slurm node name itself)."""
    names: dict[str, list[str]] = {}
    for name, node in sorted(keys.links.items()):
        if not name.startswith("ip-") and not name.startswith("i-"):
            names.setdefault(node, []).append(name)
    return names


def _take_out(ctx: CheckContext, key: str, instance: Instance | None, hyperpod_id: str | None,
              xids: list[dict[str, Any]], slurm: bool, hostnames: list[str]) -> dict[str, Any]:
    """The fix where the scheduler is known: HyperPod's API (an approved fix), else the Slurm or Kubernetes command.

    Slurm is known from ParallelCluster's tag on the node or from the job logging to ParallelCluster's log group
    (its compute fleet's CloudWatch agent writes there; AWS Batch jobs log to /aws/batch/job instead)."""
    hyperpod = ctx.inventory.hyperpod.name if ctx.inventory.hyperpod else ctx.settings.hyperpod.cluster_name
    if hyperpod_id and hyperpod:
        reboot = bool(xids) and xids[0]["action"] in {"reset", "reboot", "restart-vm"}
        return {"fix": {"action": "reboot-hyperpod-node" if reboot else "replace-hyperpod-node",
                        "cluster_name": hyperpod, "node_id": hyperpod_id}}
    if instance is None:
        return {}
    tags = instance.tags
    host = canonical(instance.private_dns) or canonical(instance.private_ip) or key
    reason = shlex.quote(f"fmdoctor training-stalled: hung the job at {ctx.now.isoformat(timespec='minutes')}")
    eks = any(k == "eks:cluster-name" or k.startswith("kubernetes.io/cluster/") for k in tags)
    if "parallelcluster:cluster-name" in tags or (slurm and not eks):
        if len(hostnames) == 1:  # the node's own streams name it by its Slurm hostname (ParallelCluster's default)
            return {"take_out": {"scheduler": "slurm", "host": hostnames[0], "command":
                                 f"scontrol update NodeName={shlex.quote(hostnames[0])} State=DRAIN Reason={reason}"}}
        # With EC2 hostnames, Slurm node names (queue-st-p5-1) are not host names: sinfo maps one to the other.
        node = f"$(sinfo -h -N -o '%N %n' | awk -v h={shlex.quote(host)} '$2 == h {{print $1}}')"
        return {"take_out": {"scheduler": "slurm", "host": host,
                             "command": f'scontrol update NodeName="{node}" State=DRAIN Reason={reason}'}}
    if eks:  # the Kubernetes node name on EKS is the private DNS name
        node = instance.private_dns or (f"{host}.{ctx.region}.compute.internal" if ctx.region != "us-east-1"
                                        else f"{host}.ec2.internal")
        return {"take_out": {"scheduler": "eks", "command": f"kubectl cordon {shlex.quote(node)} && kubectl drain "
                             f"{shlex.quote(node)} --ignore-daemonsets --delete-emptydir-data"}}
    return {}


def _identities(ctx: CheckContext, hyperpod: str | None) -> NodeIdentities:
    """The cluster's node identities, plus its HyperPod nodes (ListClusterNodes: no EC2 instances of the account)
    so a log's ``ip-10-1-0-12`` (their PrivateDnsHostname) and a stream's instance id are one node."""
    identities = NodeIdentities.of(ctx.inventory, ctx.settings.gpu.hostname_tags)
    if not hyperpod:
        return identities
    with ctx.guard(f"the names of HyperPod cluster {hyperpod}'s nodes (ListClusterNodes)"):
        return identities.with_hyperpod_nodes(hyperpod_nodes_of(ctx, hyperpod))
    return identities


def _label(identities: NodeIdentities, key: str) -> str:
    """How a summary names a host key: 'gpu-node-2 (i-0abc...)' for a node of the inventory, a HyperPod node by its
    id, anything else as the logs spelled it."""
    node = identities.nodes.get(key)
    if node is not None and node.tags.get(HYPERPOD_GROUP_TAG):
        return f"HyperPod node {key}"
    if node is not None:
        return identities.label(key)
    return f"{key} (no node of this cluster's inventory or HyperPod node list)" if key.startswith("i-") else key


def _read_next(found: Answer, conflicts: dict[str, list[str]], logs: JobLogs, dumps: int) -> list[str]:
    """What settles a disagreement: the lines each disagreeing source read, and the stronger evidence not read."""
    chosen = found.source or ""
    steps = [f"{READABLE[s]}: {found.said.get(s, '')}" for s in (chosen, *conflicts) if s]
    if not dumps:
        steps.append("no flight-recorder dumps were read: with TORCH_NCCL_TRACE_BUFFER_SIZE and "
                     "TORCH_NCCL_DUMP_ON_TIMEOUT set, the dumps name the rank that never reached the collective "
                     "(training.flight_recorder)")
    if logs.groups:
        steps.append("each named node's own job and syslog streams around the stall in " + ", ".join(logs.groups[:3]))
    return steps


def load_logs(ctx: CheckContext, hyperpod: str | None) -> JobLogs:
    training = ctx.settings.training
    result = JobLogs()
    logs = ctx.client("logs")
    groups = list(training.log_groups)
    if not groups:
        hyperpod_cluster = ctx.inventory.hyperpod
        eks = hyperpod_cluster.eks_cluster_arn.rsplit("/", 1)[-1] if hyperpod_cluster and \
            hyperpod_cluster.eks_cluster_arn else None
        with result.gaps.guard("the training job's log groups (DescribeLogGroups)"):
            groups, result.looked_for = discover_groups(logs, ctx.cluster, hyperpod, eks,
                                                        lambda prefix: LOG_GROUPS.get(ctx, prefix))
    return read_job_logs(logs, groups, ctx.now, training.log_lookback, training.silence, training.max_log_pages,
                         result)
