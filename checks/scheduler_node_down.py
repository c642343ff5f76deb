from __future__ import annotations

from datetime import UTC, datetime

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.scheduler.model import SLURM
from fmdoctor.words import plural

from ._scheduler import node_evidence, node_label, resource_of, scheduler_map

# Slurm's node states that keep a node out of scheduling (sinfo(1), NODE STATE CODES): DOWN, DRAIN (DRAINED /
# DRAINING), FAIL, INVAL (INVALID_REG in the JSON), and the '*' flag, NOT_RESPONDING.
OUT = ("DOWN", "DRAIN", "FAIL", "INVAL", "INVALID_REG", "NOT_RESPONDING")
# States in which Slurm kills or requeues what runs on the node (DOWN and FAIL end its jobs; a node that stopped
# responding is set DOWN after SlurmdTimeout).
LOSING_JOBS = ("DOWN", "FAIL", "NOT_RESPONDING")


class SchedulerNodeDown(Check):
    """No Slurm node is down, drained, failed, invalid or not responding: Slurm schedules onto every node it
    knows, and for each one it holds out this says which instance it is and the reason Slurm gave.

    The states and reasons are Slurm's own (sinfo(1) NODE STATE CODES, https://slurm.schedmd.com/sinfo.html;
    scontrol(1) update State/Reason): e.g. INVAL with "gres/gpu count reported lower than configured (7 < 8)" (a
    GPU slurmd cannot see), "Not responding", "Kill task failed". A node held out is capacity the job cannot use;
    one DOWN, FAILED or not responding with jobs on it is losing them now (critical).
    """

    id = "scheduler-node-down"
    family = "scheduler"
    concerns = frozenset({NODE, JOB})
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances",)

    def run(self, ctx: CheckContext) -> list[Finding]:
        found = scheduler_map(ctx, SLURM)
        findings = []
        for node in found.view.nodes:
            states = sorted(s for s in node.states if s in OUT)
            if not states:
                continue
            evidence = node_evidence(found, node)
            jobs = evidence["job_count"]
            instance = ctx.inventory.instance(evidence["instance"]) if evidence["instance"] else None
            if instance is not None:
                evidence["instance_state"] = instance.state
            losing = jobs and any(s in LOSING_JOBS for s in states)
            since = ""
            if node.reason_since:
                since = f" since {datetime.fromtimestamp(node.reason_since, UTC).isoformat(timespec='seconds')}"
            reason = f': "{node.reason}"' if node.reason else " (no reason given)"
            where = "" if instance is not None else " (no instance of the cluster matched it)"
            findings.append(self.finding(
                resource=resource_of(found, node),
                summary=(f"Slurm holds {node_label(found, node)}{where} out as {'+'.join(states)}{since}{reason}; "
                         f"{plural(jobs, 'job')} on it" + (", which Slurm is ending" if losing else "")),
                evidence=evidence,
                severity=Severity.CRITICAL if losing else Severity.WARNING,
            ))
        return findings
