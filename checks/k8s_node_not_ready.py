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
# Owners whose pods the node controller's eviction does not move: a DaemonSet's pod tolerates not-ready and
# unreachable (its controller adds those tolerations), a static pod's mirror is owned by its Node.
NOT_EVICTED = ("DaemonSet/", "Node/")


class K8sNodeNotReady(Check):
    """Every Kubernetes node is Ready, and none carries a HyperPod health label that keeps work off it.

    The kubelet reports the Ready condition; False or Unknown (the kubelet stopped posting status) makes the
    node controller taint it not-ready/unreachable and evict its pods after their toleration (300 s by default)
    (https://kubernetes.io/docs/reference/node/node-status/#condition, https://kubernetes.io/docs/concepts/
    scheduling-eviction/taint-and-toleration/#taint-based-evictions): critical. SageMaker HyperPod labels a node
    sagemaker.amazonaws.com/node-health-status Unschedulable, UnschedulablePendingReboot or
    UnschedulablePendingReplacement while it checks or recovers it (https://docs.aws.amazon.com/sagemaker/latest/
    dg/sagemaker-hyperpod-eks-resiliency-node-labels.html): a warning while HyperPod works on it. Critical needs
    workload pods on the node (what the eviction ends); a node with only DaemonSet/static pods, as every node
    still booting is (Ready False "cni plugin not initialized" until the CNI is up), is a warning.
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
            workloads = [j for j in found.view.jobs_on(node.name) if not j.user.startswith(NOT_EVICTED)]
            pods_unread = any(g.startswith("pods") for g in found.view.gaps)  # then none is proven absent
            evidence["workload_pods"] = len(workloads)
            count = evidence["job_count"]
            on_it = ("its pods could not be read" if pods_unread else f"{plural(count, 'pod')} on it" if workloads
                     else f"{plural(count, 'pod')} on it, no workload pod (DaemonSet/static pods only)")
            findings.append(self.finding(
                resource=resource_of(found, node),
                summary=f"Kubernetes node {node_label(found, node)} {' and '.join(parts)}; {on_it}.",
                evidence=evidence,
                severity=Severity.CRITICAL if not_ready and (workloads or pods_unread) else Severity.WARNING,
            ))
        return findings
