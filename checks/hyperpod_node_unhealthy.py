from __future__ import annotations

from collections import Counter
from typing import Any

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import INSTANCE_GROUP, NODE
from fmdoctor.engine.errors import describe_aws_failure
from fmdoctor.engine.hyperpod import HYPERPOD_CLUSTER, HYPERPOD_NODES, HyperPodCluster, HyperPodNode
from fmdoctor.engine.inventory import HYPERPOD
from fmdoctor.engine.model import Finding, Severity

from ._common import hyperpod_cluster_of, hyperpod_nodes_of

# What each non-Running status means for the job, and whether it is a fault or a wait.
_STATUS = {
    "Failure": (Severity.CRITICAL, "has failed"),
    "NotFound": (Severity.CRITICAL, "is gone (its instance was not found)"),
    "Pending": (Severity.WARNING, "is pending (being provisioned or replaced)"),
    "ShuttingDown": (Severity.WARNING, "is shutting down"),
    "SystemUpdating": (Severity.WARNING, "is being updated by SageMaker"),
    "DeepHealthCheckInProgress": (Severity.WARNING, "is running deep health checks"),
    "AttachInProgress": (Severity.WARNING, "is being attached"),
    "DetachInProgress": (Severity.WARNING, "is being detached"),
}
_REPLACE = {"Failure", "NotFound"}


class HyperpodNodeUnhealthy(Check):
    """Every node of the SageMaker HyperPod cluster (named like the cluster, or hyperpod.cluster_name) is
    'Running': none failed, pending replacement, shutting down, updating or in deep health checks.

    A node that is not Running is out of the job: a synchronous training job waits for it or fails, and a
    failed one stays failed unless HyperPod's automatic node recovery or a person replaces it.
    """

    id = "hyperpod-node-unhealthy"
    family = "hyperpod"
    concerns = frozenset({NODE, INSTANCE_GROUP})
    severity = Severity.CRITICAL
    iam_actions = ("sagemaker:DescribeCluster", "sagemaker:ListClusterNodes")
    # The cluster it reads is named before the inventory: hyperpod.cluster_name, else the target's own name.
    prefetch = (HYPERPOD_CLUSTER.with_subjects(lambda start: [start.settings.hyperpod.cluster_name or start.cluster]),
                HYPERPOD_NODES)
    inventory = frozenset({HYPERPOD})  # its nodes are no EC2 instances of this account

    def run(self, ctx: CheckContext) -> list[Finding]:
        cluster = self._cluster(ctx)
        nodes = hyperpod_nodes_of(ctx, cluster.name)  # listed once per run, shared with the GPU checks
        counts = Counter(n.status for n in nodes)
        return [self._finding(ctx, cluster, node, counts) for node in nodes if node.status != "Running"]

    def _cluster(self, ctx: CheckContext) -> HyperPodCluster:
        configured = ctx.settings.hyperpod.cluster_name
        name = configured or ctx.cluster
        found = ctx.inventory.hyperpod
        if found is not None and found.name == name:
            return found  # discovery already described it
        try:
            cluster = hyperpod_cluster_of(ctx, name)
        except Exception as exc:
            failure = describe_aws_failure(exc)
            if configured or failure is None or failure.kind != "access-denied":
                raise
            # Not configured, and SageMaker is off limits: most EC2 clusters are not HyperPod, so say so
            # as a skip rather than turning every run of such a cluster into a warning.
            raise NotApplicable(f"could not look for a HyperPod cluster named {name!r} ({failure.code} on "
                                "sagemaker:DescribeCluster); set hyperpod.cluster_name to check one") from None
        if cluster is None:
            raise NotApplicable(f"no SageMaker HyperPod cluster named {name!r} in {ctx.region}")
        return cluster

    def _finding(self, ctx: CheckContext, cluster: HyperPodCluster, node: HyperPodNode,
                 counts: Counter[str]) -> Finding:
        severity, meaning = _STATUS.get(node.status, (Severity.WARNING, f"is {node.status}"))
        automatic = cluster.node_recovery == "Automatic"
        if node.status in _REPLACE:
            advice = ("HyperPod's automatic node recovery should replace it; confirm it does" if automatic
                      else "replace it (node recovery is not automatic)")
        else:
            advice = "wait for it, and replace it if it does not return to Running"
        message = f" ({node.message})" if node.message else ""
        evidence: dict[str, Any] = {
            "cluster_name": cluster.name,
            "node_id": node.node_id,
            "instance_group": node.group,
            "instance_type": node.instance_type,
            "status": node.status,
            "message": node.message,
            "launch_time": node.launch_time.isoformat() if node.launch_time else None,
            "node_recovery": cluster.node_recovery,
            "cluster_status": cluster.status,
            "nodes_by_status": dict(sorted(counts.items())),
        }
        if node.status in _REPLACE and not automatic:
            evidence["fix"] = [
                {"action": "replace-hyperpod-node", "cluster_name": cluster.name, "node_id": node.node_id}
            ]
        return self.finding(
            resource=node.node_id,
            summary=(f"HyperPod node {node.node_id} in instance group {node.group} of {cluster.name} {meaning}"
                     f"{message}: {advice}."),
            evidence=evidence,
            severity=severity,
        )
