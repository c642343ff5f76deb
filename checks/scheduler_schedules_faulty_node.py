from __future__ import annotations

from fmdoctor.engine.check import Check, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.scheduler.model import KUBERNETES, SchedulerNode
from fmdoctor.spot.sources import spot_facts
from fmdoctor.words import plural

from ._scheduler import kinds_of, node_evidence, node_label, scheduler_map
from ._spot import SPOT_IAM, interruptions

# Slurm states in which it still starts jobs on a node (sinfo(1)): anything without these.
HELD = ("DOWN", "DRAIN", "FAIL", "INVAL", "INVALID_REG", "NOT_RESPONDING", "MAINTENANCE", "REBOOT_REQUESTED",
        "POWERING_DOWN", "POWERED_DOWN")
MAX_REASON = 200


def schedulable(node: SchedulerNode, kind: str) -> bool:
    if kind == KUBERNETES:
        return not node.has("CORDONED", "DISRUPTING") and "READY" in node.states
    return not node.has(*HELD)


class SchedulerSchedulesFaultyNode(Check):
    """The scheduler schedules onto no node that AWS has given an imminent interruption notice (Spot or
    interruptible Capacity Reservation interruption, or a scheduled event within the hour): every such node is
    drained in Slurm or cordoned in Kubernetes.

    EC2 interrupts a Spot instance two minutes after its warning (https://docs.aws.amazon.com/AWSEC2/latest/
    UserGuide/spot-instance-termination-notices.html); a job Slurm or Kubernetes still starts there dies with it.
    Draining (scontrol update State=DRAIN, https://slurm.schedmd.com/scontrol.html) or cordoning
    (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_cordon/) stops new work landing on it; the
    fix does that through the scheduler once approved.
    """

    id = "scheduler-schedules-faulty-node"
    family = "scheduler"
    concerns = frozenset({NODE, JOB})
    severity = Severity.CRITICAL
    iam_actions = SPOT_IAM

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
        facts = spot_facts(ctx)
        findings = []
        for item, found in ((i, f) for i in interruptions(ctx, facts) for f in views):
            kind = found.view.kind
            if not item.imminent:
                continue
            for node in found.nodes_of(item.instance_id):
                if not schedulable(node, kind):
                    continue
                evidence = node_evidence(found, node)
                evidence["fault"] = item.evidence(ctx, facts)
                reason = f"fmdoctor: {item.cause} {item.action} at {item.action_time.isoformat(timespec='seconds')}"
                if kind == KUBERNETES:
                    evidence["fix"] = [{"action": "cordon-k8s-node", "node": node.name}]
                    verb = "Kubernetes can still place pods on"
                else:
                    evidence["fix"] = [{"action": "drain-slurm-node", "node": node.name, "reason": reason[:MAX_REASON]}]
                    verb = "Slurm still schedules onto"
                findings.append(self.finding(
                    resource=item.instance_id,
                    summary=(f"{verb} {node_label(found, node)} although {item.sentence(ctx.now)}; "
                             f"{plural(evidence['job_count'], 'job')} on it now: drain it through the scheduler."),
                    evidence=evidence,
                ))
        return findings
