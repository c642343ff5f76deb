from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.scheduler.kubernetes import HEALTH_LABEL
from fmdoctor.scheduler.model import KUBERNETES
from fmdoctor.words import plural

from ._scheduler import node_evidence, node_label, resource_of, scheduler_map

# HyperPod's node-health-status values that keep work off a node (the label's documentation, module docstring).
UNHEALTHY_LABELS = {"Unschedulable": "is running deep health checks",
                    "UnschedulablePendingReplacement": "failed health checks and awaits replacement",
                    "UnschedulablePendingReboot": "failed health checks and awaits a reboot"}


class K8sNodeNotReady(Check):
    """Every Kubernetes node is Ready, and none carries a HyperPod health label that keeps work off it.

    The kubelet reports the Ready condition; False or Unknown (the kubelet stopped posting status) makes the
    node controller taint it not-ready/unreachable and evict its pods after their toleration (300 s by default)
    (https://kubernetes.io/docs/reference/node/node-status/#condition, https://kubernetes.io/docs/concepts/
    scheduling-eviction/taint-and-toleration/#taint-based-evictions): critical. SageMaker HyperPod labels a node
    sagemaker.amazonaws.com/node-health-status Unschedulable, UnschedulablePendingReboot or
    UnschedulablePendingReplacement while it checks or recovers it (https://docs.aws.amazon.com/sagemaker/latest/
    dg/sagemaker-hyperpod-eks-resiliency-node-labels.html): a warning while HyperPod works on it.
    """

    id = "k8s-node-not-ready"
    family = "scheduler"
    concerns = frozenset({NODE})
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances",)

    def run(self, ctx: CheckContext) -> list[Finding]:
        found = scheduler_map(ctx, KUBERNETES)
        findings = []
        for node in found.view.nodes:
            health = node.labels.get(HEALTH_LABEL)
            not_ready = "READY" not in node.states
            if not not_ready and health not in UNHEALTHY_LABELS:
                continue
            evidence = node_evidence(found, node)
            evidence.update(conditions=dict(node.conditions), taints=list(node.taints),
                            health_label=health)
            parts = []
            if not_ready:
                ready = node.conditions.get("Ready", "absent")
                parts.append(f"is not Ready (Ready={ready}{': ' + node.reason if node.reason else ''})")
            if health in UNHEALTHY_LABELS:
                parts.append(f"HyperPod says it {UNHEALTHY_LABELS[health]} ({HEALTH_LABEL}={health})")
            findings.append(self.finding(
                resource=resource_of(found, node),
                summary=f"Kubernetes node {node_label(found, node)} {' and '.join(parts)}; "
                        f"{plural(evidence['job_count'], 'pod')} on it.",
                evidence=evidence,
                severity=Severity.CRITICAL if not_ready else Severity.WARNING,
            ))
        return findings
