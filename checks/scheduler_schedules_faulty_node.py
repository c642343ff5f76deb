from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.engine.check import ACCELERATOR_METRICS, Check, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.errors import describe_aws_failure
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.model import XID
from fmdoctor.node.xid_catalogue import ACTION_ORDER, CATALOGUE_URL
from fmdoctor.scheduler.model import KUBERNETES, SchedulerNode
from fmdoctor.scheduler.source import SchedulerMap
from fmdoctor.spot.sources import spot_facts
from fmdoctor.training.culprit import NodeKeys
from fmdoctor.words import plural

from ._common import id_list
from ._gpu import IAM_ACTIONS as GPU_IAM
from ._gpu import cluster_metrics
from ._net import efa_shortfall, groups_using_efa
from ._scheduler import kinds_of, node_evidence, node_label, scheduler_map
from ._spot import SPOT_IAM, interruptions
from ._training import node_xids
from .gpu_xid_metrics import _events as xid_events

# Slurm states in which it still starts jobs on a node (sinfo(1)): anything without these.
HELD = ("DOWN", "DRAIN", "FAIL", "INVAL", "INVALID_REG", "NOT_RESPONDING", "MAINTENANCE", "REBOOT_REQUESTED",
        "POWERING_DOWN", "POWERED_DOWN")
MAX_REASON = 200
XID_FAULT, EFA_FAULT, SPOT_FAULT = "xid", "efa", "spot"
WHAT = {XID_FAULT: "Xid errors NVIDIA resolves by a reset, reboot or replacement",
        EFA_FAULT: "missing EFA interfaces", SPOT_FAULT: "Spot and interruption notices"}
RESET = ACTION_ORDER.index("reset")  # from here on NVIDIA's catalogue takes the GPU or node out of service


@dataclass(frozen=True)
class Fault:
    """One critical fault on an instance, with the evidence that proves it and the drain reason it gives."""

    kind: str  # XID_FAULT, EFA_FAULT or SPOT_FAULT
    instance_id: str
    sentence: str  # "GPU 3 reported Xid 79 (...)": follows "although"
    reason: str  # the scheduler's drain reason
    severity: Severity = Severity.CRITICAL
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Faults:
    """Every fault found, by instance, and each fault kind that could not be read (kind -> why): such a kind is
    not verified, never a pass."""

    on: dict[str, list[Fault]] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)

    def add(self, fault: Fault) -> None:
        self.on.setdefault(fault.instance_id, []).append(fault)


def schedulable(node: SchedulerNode, kind: str) -> bool:
    """Whether the scheduler still starts work on it: Slurm's IDLE/MIXED/ALLOCATED with none of the states that
    keep jobs off it (DRAIN, DOWN, FAIL, ...; sinfo(1) NODE STATE CODES); a Kubernetes node that is Ready and not
    cordoned (spec.unschedulable)."""
    if kind == KUBERNETES:
        return not node.has("CORDONED", "DISRUPTING") and "READY" in node.states
    return not node.has(*HELD)


def judge(node: SchedulerNode, kind: str, faults: Sequence[Fault]) -> list[Fault]:
    """The faults that matter on a node: all of them while the scheduler still schedules onto it, none once it
    is out (drained, down, cordoned); worst first."""
    if not schedulable(node, kind):
        return []
    return sorted(faults, key=lambda f: -f.severity.rank)


def xid_fault(instance_id: str, xids: Iterable[Mapping[str, Any]], source: str) -> Fault | None:
    """The worst Xid NVIDIA's catalogue resolves by a reset, reboot or replacement (docs.nvidia.com/deploy/
    xid-errors); None when every Xid is application-level or informational (gpu-xid-metrics reports those)."""
    serious = [x for x in xids if ACTION_ORDER.index(x["action"]) >= RESET]
    if not serious:
        return None
    worst = max(serious, key=lambda x: ACTION_ORDER.index(x["action"]))
    where = {"prometheus": "in its DCGM metrics (DCGM_FI_DEV_XID_ERRORS)",
             "logs": "in its kernel log (CloudWatch Logs)"}[source]
    gpu = f"GPU {worst['gpu']} " if worst.get("gpu") is not None else "a GPU "
    sentence = (f"{gpu}reported Xid {worst['xid']} ({worst.get('meaning') or 'not in the catalogue'}) {where}, "
                f"which NVIDIA resolves by '{worst['action']}'")
    return Fault(XID_FAULT, instance_id, sentence, f"fmdoctor: Xid {worst['xid']} ({worst['action']})",
                 evidence={"kind": XID_FAULT, "source": source, "catalogue": CATALOGUE_URL, "xids": serious[:10]})


def metric_xids(ctx: CheckContext, faults: Faults) -> set[str]:
    """Xid faults from the run's one metrics snapshot (shared with gpu-xid-metrics, judged as it judges them);
    the instances whose metrics carry the Xid series (their Xid state is known)."""
    try:
        metrics = cluster_metrics(ctx)
    except Exception as exc:  # recorded by the GPU checks too; here the Xid kind is what is left unknown
        faults.unread["metrics"] = _why("the GPU metrics (DCGM_FI_DEV_XID_ERRORS)", exc)
        return set()
    seen = set()
    for instance_id, node in metrics.nodes.items():
        if not node.publishes_signal(XID):
            continue
        seen.add(instance_id)
        xids = [{"gpu": d.device, "xid": code, "meaning": verdict.description, "action": verdict.action,
                 "first_period_end": when, "held_from_before_window": held}
                for d in node.reporting for code, verdict, when, held in xid_events(d)]
        fault = xid_fault(instance_id, xids, "prometheus")
        if fault is not None:
            faults.add(fault)
    return seen


def log_xids(ctx: CheckContext, found: SchedulerMap, faults: Faults) -> bool:
    """Xid faults from the nodes' kernel-log lines in the job's log groups, read once with training-stalled
    (the same shared JobLogs); whether those logs could be read."""
    from .training_stalled import LOGS_KEY, load_logs

    inv = ctx.inventory
    hyperpod = inv.hyperpod.name if inv.hyperpod else ctx.settings.hyperpod.cluster_name
    try:
        logs = ctx.shared(LOGS_KEY, lambda: load_logs(ctx, hyperpod))
    except Exception as exc:
        faults.unread["logs"] = _why("the nodes' kernel logs in CloudWatch Logs", exc)
        return False
    if not logs.readable:
        faults.unread["logs"] = "the nodes' kernel logs in CloudWatch Logs: no readable log group"
        return False
    for key, items in node_xids(logs.events, ctx.now, NodeKeys(found.identities, logs.streams)).items():
        if key.startswith("i-"):  # a host the logs name but no instance resolves to is no node Slurm maps
            fault = xid_fault(key, [{**x, "gpu": x.get("pci")} for x in items], "logs")
            if fault is not None:
                faults.add(fault)
    return True


def efa_faults(ctx: CheckContext, instance_ids: Iterable[str], faults: Faults) -> list[str]:
    """Missing-EFA faults by efa-not-attached's and efa-missing-interfaces' rule (checks/_net.efa_shortfall):
    DescribeInstances' EFA interfaces against DescribeInstanceTypes' EfaInfo; the nodes that could not be judged."""
    inv = ctx.inventory
    efa_groups = groups_using_efa(inv)
    unjudged = []
    for instance_id in instance_ids:
        node = inv.instance(instance_id)
        if node is None:
            continue
        try:
            short = efa_shortfall(inv, node, efa_groups)
        except LookupError:
            unjudged.append(inv.label(instance_id))
            continue
        if short is None:
            continue
        sentence = (f"it has {short.have} of the {short.expected} EFA interfaces its {node.instance_type} takes"
                    + (" (none: its collectives fall back to TCP)" if short.none else ""))
        faults.add(Fault(EFA_FAULT, instance_id, sentence,
                         f"fmdoctor: {short.have} of {short.expected} EFA interfaces",
                         Severity.CRITICAL if short.none else Severity.WARNING,
                         {"kind": EFA_FAULT, "efa_interfaces": short.have, "max_efa_interfaces": short.expected,
                          "expected_because": short.why, "instance_type": node.instance_type,
                          "rule": "efa-not-attached" if short.none else "efa-missing-interfaces"}))
    return unjudged


def spot_faults(ctx: CheckContext, faults: Faults) -> None:
    try:
        facts = spot_facts(ctx)
        for item in interruptions(ctx, facts):
            if item.imminent:
                faults.add(Fault(SPOT_FAULT, item.instance_id, item.sentence(ctx.now),
                                 f"fmdoctor: {item.cause} {item.action} at "
                                 f"{item.action_time.isoformat(timespec='seconds')}",
                                 evidence={"kind": SPOT_FAULT, **item.evidence(ctx, facts)}))
    except Exception as exc:
        faults.unread[SPOT_FAULT] = _why("Spot and interruption notices", exc)


def _why(what: str, exc: Exception) -> str:
    failure = describe_aws_failure(exc)
    return f"{what}: {failure.code} ({failure.iam_action or failure.message})" if failure else f"{what}: {exc}"


class SchedulerSchedulesFaultyNode(Check):
    """The scheduler schedules onto no node with a critical fault on it: every node with an Xid NVIDIA resolves
    by a reset, reboot or replacement, with missing EFA interfaces, or with an imminent AWS interruption notice is
    drained in Slurm or cordoned in Kubernetes.

    "Still schedules" is Slurm's IDLE, MIXED or ALLOCATED without DRAIN, DOWN, FAIL (or another state that keeps
    jobs off; sinfo(1) NODE STATE CODES, https://slurm.schedmd.com/sinfo.html) and a Ready, uncordoned Kubernetes
    node. The faults, each with positive evidence and read from the same source as the check that owns it:
    an Xid whose row in NVIDIA's catalogue (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
    fmdoctor.node.xid_catalogue) needs a GPU reset, a reboot or a replacement, from DCGM_FI_DEV_XID_ERRORS
    (gpu-xid-metrics' snapshot) or the node's kernel-log line in CloudWatch Logs (training-stalled's logs);
    missing EFA, the interfaces DescribeInstances lists against DescribeInstanceTypes' EfaInfo by the rules of
    efa-not-attached (none: critical) and efa-missing-interfaces (fewer than MaximumEfaInterfaces: a warning)
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html); a Spot or interruptible
    Capacity Reservation notice or a scheduled event within the hour (EC2 interrupts a Spot instance two
    minutes after its warning, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-
    notices.html). A fault kind whose source cannot be read is reported as not verified, never as a pass.
    Draining (scontrol update State=DRAIN, https://slurm.schedmd.com/scontrol.html) or cordoning
    (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_cordon/) stops new work landing on it; the
    fix does that through the scheduler once approved.
    """

    id = "scheduler-schedules-faulty-node"
    family = "scheduler"
    concerns = frozenset({NODE, JOB})
    severity = Severity.CRITICAL
    iam_actions = tuple(sorted({*SPOT_IAM, *GPU_IAM, "ec2:DescribeInstances", "ec2:DescribeInstanceTypes",
                                "logs:DescribeLogGroups", "logs:DescribeLogStreams", "logs:FilterLogEvents"}))
    metrics = frozenset({ACCELERATOR_METRICS})  # the Xid series of the run's one snapshot

    def run(self, ctx: CheckContext) -> list[Finding]:
        kinds, _ = kinds_of(ctx.scope)
        views = []
        for kind in kinds or (None,):
            try:
                views.append(scheduler_map(ctx, kind))
            except Unverified:
                continue  # recorded on ctx; the other scheduler may still be read
        if not views:
            raise Unverified("no scheduler could be read")
        scheduled = sorted({found.instance_of[n.name] for found in views for n in found.view.nodes
                            if n.name in found.instance_of and schedulable(n, found.view.kind)})
        faults = Faults()
        spot_faults(ctx, faults)
        xid_seen = metric_xids(ctx, faults)
        logs_read = log_xids(ctx, views[0], faults)  # once: the logs name instances, whichever scheduler
        unjudged = efa_faults(ctx, scheduled, faults)
        self._unverified(ctx, faults, scheduled, xid_seen, logs_read, unjudged)
        findings = []
        for found in views:
            for node in found.view.nodes:
                instance_id = found.instance_of.get(node.name)
                on = judge(node, found.view.kind, faults.on.get(instance_id, [])) if instance_id else []
                if on:
                    findings.append(self._finding(found, node, instance_id or "", on))
        return findings

    def _unverified(self, ctx: CheckContext, faults: Faults, scheduled: list[str], xid_seen: set[str],
                    logs_read: bool, unjudged: list[str]) -> None:
        if SPOT_FAULT in faults.unread:
            ctx.unverified(f"whether the scheduler schedules onto a node with {WHAT[SPOT_FAULT]}", "FaultUnread",
                           faults.unread[SPOT_FAULT])
        blind = [ctx.inventory.label(i) for i in scheduled if i not in xid_seen] if not logs_read else []
        if blind:
            why = "; ".join(faults.unread.get(k, "") for k in ("metrics", "logs") if faults.unread.get(k))
            ctx.unverified(f"whether the scheduler schedules onto a node with {WHAT[XID_FAULT]}: "
                           f"{plural(len(blind), 'node')} ({id_list(blind)})", "FaultUnread",
                           (why + "; " if why else "") + "neither their DCGM Xid series nor their kernel logs were "
                           "read: point metrics.url at the DCGM exporter's Prometheus or ship the nodes' syslog to "
                           "CloudWatch Logs (training.log_groups)")
        if unjudged:
            ctx.unverified(f"whether the scheduler schedules onto a node with {WHAT[EFA_FAULT]}: "
                           f"{plural(len(unjudged), 'node')} ({id_list(unjudged)})", "InstanceTypeNoEfaInfo",
                           "DescribeInstanceTypes did not say how many EFA interfaces their type takes")

    def _finding(self, found: SchedulerMap, node: SchedulerNode, instance_id: str, on: list[Fault]) -> Finding:
        kind = found.view.kind
        worst = on[0]
        evidence = node_evidence(found, node)
        evidence["fault"] = dict(worst.evidence)
        evidence["faults"] = [dict(f.evidence) for f in on]
        evidence["fault_kinds"] = sorted({f.kind for f in on})
        reason = "; ".join(dict.fromkeys(f.reason for f in on))
        if kind == KUBERNETES:
            evidence["fix"] = [{"action": "cordon-k8s-node", "node": node.name}]
            verb = "Kubernetes can still place pods on"
        else:
            evidence["fix"] = [{"action": "drain-slurm-node", "node": node.name, "reason": reason[:MAX_REASON]}]
            verb = "Slurm still schedules onto"
        others = sorted({f.kind for f in on} - {worst.kind})
        also = f" (and {' and '.join(WHAT[k] for k in others)})" if others else ""
        return self.finding(
            resource=instance_id,
            severity=worst.severity,
            summary=(f"{verb} {node_label(found, node)} although {worst.sentence}{also}; "
                     f"{plural(evidence['job_count'], 'job')} on it now: drain it through the scheduler."),
            evidence=evidence,
        )
