from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import JOB
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.scheduler.model import KUBERNETES

from ._scheduler import scheduler_map


class K8sGpuPodsPending(Check):
    """No pod that requests GPUs, Neuron devices or EFA interfaces is waiting because the scheduler cannot
    place it (Pending with PodScheduled=False, reason Unschedulable).

    The scheduler sets PodScheduled False/Unschedulable with the per-node reasons ("0/4 nodes are available:
    2 Insufficient nvidia.com/gpu, ...") when no node fits (https://kubernetes.io/docs/concepts/workloads/pods/
    pod-lifecycle/#pod-conditions); for a training job one unplaced worker holds every other one.
    """

    id = "k8s-gpu-pods-pending"
    family = "scheduler"
    concerns = frozenset({JOB})
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances",)

    def run(self, ctx: CheckContext) -> list[Finding]:
        found = scheduler_map(ctx, KUBERNETES)
        findings = []
        for pod in found.view.pending:
            if not pod.requests:
                continue
            wants = ", ".join(f"{k}={v}" for k, v in sorted(pod.requests.items()))
            findings.append(self.finding(
                resource=f"pod/{pod.id}",
                summary=f"Pod {pod.id} ({pod.user}) asks for {wants} and cannot be placed: {pod.state}",
                evidence={"scheduler": KUBERNETES, "pod": pod.to_evidence(), "requests": dict(pod.requests),
                          "why": pod.state, "jobs": [pod.to_evidence()]},
            ))
        return findings
