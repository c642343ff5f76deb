from __future__ import annotations

from datetime import UTC, datetime

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.scheduler.model import SLURM

from ._scheduler import node_evidence, node_label, scheduler_map

# Drained by hand or by a health check, not by Slurm's own judgement at registration (INVAL) and not for a node
# that is not answering: those Slurm re-evaluates itself.
SELF_CLEARING = ("INVALID_REG", "INVAL", "NOT_RESPONDING", "DOWN", "FAIL")
# Held out on purpose and shown so by Slurm (node_state_string: DRAINED$ in a MAINT reservation, DRAINED@ / DRAINED^
# for a reboot asked with scontrol reboot ASAP): resuming would undo the plan.
ON_PURPOSE = ("MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED")


class SchedulerNodeHeldOut(Check):
    """No Slurm node has been drained for longer than scheduler.held_out_after while AWS sees its instance
    running and Slurm sees it responding and idle: capacity kept out for a reason that may no longer hold.

    A heuristic, and said to be one (a warning, never critical): Slurm keeps a DRAIN until someone resumes it
    (scontrol(1) update State=RESUME, https://slurm.schedmd.com/scontrol.html#OPT_State_1), whatever the cause
    was, while a node that is DOWN, FAIL, INVAL or not responding Slurm re-evaluates itself (ReturnToService,
    https://slurm.schedmd.com/slurm.conf.html#OPT_ReturnToService), and one in a maintenance reservation or
    awaiting a reboot Slurm shows as held on purpose (MAINTENANCE, REBOOT_REQUESTED/ISSUED flags): none of
    those is judged. Check the reason; if it no longer holds,
    the fix resumes the node through Slurm.
    """

    id = "scheduler-node-held-out"
    family = "scheduler"
    concerns = frozenset({NODE, JOB})
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances",)

    def run(self, ctx: CheckContext) -> list[Finding]:
        found = scheduler_map(ctx, SLURM)
        after = ctx.settings.scheduler.held_out_after
        findings = []
        for node in found.view.nodes:
            if "DRAIN" not in node.states or node.has(*SELF_CLEARING, *ON_PURPOSE) or found.view.jobs_on(node.name):
                continue
            instance_id = found.instance_of.get(node.name)
            instance = ctx.inventory.instance(instance_id) if instance_id else None
            if instance is None or instance.state != "running":
                continue  # not ours to judge, or AWS does not see it healthy either
            since = datetime.fromtimestamp(node.reason_since, UTC) if node.reason_since else None
            held = ctx.now - since if since else None
            if held is None or held < after:
                continue
            evidence = node_evidence(found, node)
            evidence.update(instance_state=instance.state, held_for_s=int(held.total_seconds()), heuristic=True,
                            fix=[{"action": "resume-slurm-node", "node": node.name}])
            findings.append(self.finding(
                resource=instance.id,
                summary=(f"Slurm has kept {node_label(found, node)} drained for {format_duration(held)} "
                         f"(\"{node.reason or 'no reason'}\") though AWS sees it running and Slurm sees it idle "
                         "and responding: a heuristic; if the reason no longer holds, resume it."),
                evidence=evidence,
            ))
        return findings

