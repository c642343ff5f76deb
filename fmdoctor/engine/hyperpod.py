"""SageMaker HyperPod clusters: DescribeCluster and the paginated ListClusterNodes, as plain data.

A HyperPod cluster's nodes run in a SageMaker service account, not as EC2 instances of the customer's, so
discovery looks a cluster name up here when no tagged instance carries it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.errors import describe_aws_failure
from fmdoctor.engine.prefetch import EarlyLoad

if TYPE_CHECKING:  # the inventory's types import this module; botocore only when a cluster is described
    from collections.abc import Callable

    from fmdoctor.engine.aws import Aws
    from fmdoctor.engine.context import RunStart

NODE_PAGE_SIZE = 100  # ListClusterNodes' maximum


@dataclass(frozen=True)
class HyperPodGroup:
    name: str
    instance_type: str
    current_count: int
    target_count: int


@dataclass(frozen=True)
class HyperPodCluster:
    name: str
    arn: str
    status: str
    node_recovery: str | None = None  # 'Automatic': HyperPod replaces failed nodes itself
    orchestrator: str | None = None  # 'Slurm' or 'Eks'
    failure_message: str = ""
    groups: tuple[HyperPodGroup, ...] = ()
    eks_cluster_arn: str | None = None  # the EKS cluster an Eks-orchestrated HyperPod cluster runs in


@dataclass(frozen=True)
class HyperPodNode:
    node_id: str  # the InstanceId ListClusterNodes returns, i-... in a SageMaker-owned account
    group: str
    instance_type: str
    status: str
    message: str = ""
    launch_time: datetime | None = None
    private_dns: str | None = None  # PrivateDnsHostname: ip-10-1-2-3.us-west-2.compute.internal


def is_not_found(exc: BaseException) -> bool:
    """DescribeCluster's 'no such cluster' (ResourceNotFound; moto answers ValidationException 'Could not find')."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    error = exc.response.get("Error", {})
    code, message = error.get("Code", ""), error.get("Message", "")
    return code in {"ResourceNotFound", "ResourceNotFoundException"} or (
        code.startswith("Validation") and "could not find" in message.lower()
    )


def describe_hyperpod_cluster(sagemaker: Any, name: str) -> HyperPodCluster | None:
    """The cluster, or None when no HyperPod cluster has that name; other AWS failures propagate."""
    from botocore.exceptions import ClientError

    try:
        raw = sagemaker.describe_cluster(ClusterName=name)
    except ClientError as exc:
        if is_not_found(exc):
            return None
        raise
    orchestrator = raw.get("Orchestrator") or {}
    return HyperPodCluster(
        name=raw.get("ClusterName", name),
        arn=raw.get("ClusterArn", ""),
        status=raw.get("ClusterStatus", "?"),
        node_recovery=raw.get("NodeRecovery"),
        orchestrator=next(iter(orchestrator), None) if isinstance(orchestrator, dict) else None,
        failure_message=raw.get("FailureMessage") or "",
        eks_cluster_arn=(orchestrator.get("Eks") or {}).get("ClusterArn") if isinstance(orchestrator, dict) else None,
        groups=tuple(
            HyperPodGroup(g.get("InstanceGroupName", "?"), g.get("InstanceType", "?"), int(g.get("CurrentCount", 0)),
                          int(g.get("TargetCount", 0)))
            for g in raw.get("InstanceGroups", [])
        ),
    )


# Answers that say this account holds no HyperPod cluster of that name for us: denied, absent, or a name HyperPod
# would not accept (an EC2 cluster's name need not follow its pattern).
_NOT_HERE = frozenset({"access-denied", "not-found", "bad-input"})


def probe_hyperpod_cluster(aws: Aws, name: str,
                           describe: Callable[[str], HyperPodCluster | None] | None = None) -> HyperPodCluster | None:
    """Discovery's look-up: a denial (no SageMaker permission, say) or a name HyperPod refuses means 'not found
    here', so a mistyped EC2 cluster name still reads as an unknown cluster rather than a SageMaker error. A call
    that did not answer (throttled past its retries, timed out, a server error) propagates: the target may well
    exist, and it is unread, never "no such cluster". ``describe``: how to describe it (the run's shared
    :data:`HYPERPOD_CLUSTER`), when not a call of its own."""
    try:
        return describe(name) if describe else describe_hyperpod_cluster(aws.client("sagemaker"), name)
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None or failure.kind not in _NOT_HERE:
            raise
        return None


def list_hyperpod_nodes(sagemaker: Any, name: str) -> list[HyperPodNode]:
    nodes = []
    pages = sagemaker.get_paginator("list_cluster_nodes").paginate(
        ClusterName=name, PaginationConfig={"PageSize": NODE_PAGE_SIZE}
    )
    for page in pages:
        for raw in page.get("ClusterNodeSummaries", []):
            status = raw.get("InstanceStatus") or {}
            nodes.append(
                HyperPodNode(
                    node_id=raw.get("InstanceId", "?"),
                    group=raw.get("InstanceGroupName", "?"),
                    instance_type=raw.get("InstanceType", "?"),
                    status=status.get("Status", "?"),
                    message=status.get("Message") or "",
                    launch_time=raw.get("LaunchTime"),
                    private_dns=raw.get("PrivateDnsHostname") or None,
                )
            )
    return nodes


def _configured(start: RunStart) -> list[str]:
    return [start.settings.hyperpod.cluster_name] if start.settings.hyperpod.cluster_name else []


# DescribeCluster and ListClusterNodes once per run by cluster name, for discovery's probe and every check that reads
# a HyperPod cluster; started before the inventory for the name hyperpod.cluster_name configures.
HYPERPOD_CLUSTER: EarlyLoad[HyperPodCluster | None] = EarlyLoad(
    "hyperpod.cluster", lambda start, name: describe_hyperpod_cluster(start.client("sagemaker"), name),
    ("sagemaker:DescribeCluster",), _configured, regional=True)
HYPERPOD_NODES: EarlyLoad[list[HyperPodNode]] = EarlyLoad(
    "hyperpod.nodes", lambda start, name: list_hyperpod_nodes(start.client("sagemaker"), name),
    ("sagemaker:ListClusterNodes",), _configured, regional=True)
