"""Find the clusters of one account/region with the fewest calls: one listing per source, paginated.

Tagged clusters (fmdoctor, ParallelCluster, EKS tag keys) come from one DescribeInstances filtered by
``tag-key`` (the values of one filter are OR-ed, so every configured key fits in one filter) and by
state, 1,000 instances a page. The Resource Groups Tagging API would need one GetResources per tag key
(its tag filters AND), 100 resources a page, another IAM action, and it lists terminated instances for
a while; the checks already need ec2:DescribeInstances. HyperPod clusters come from SageMaker
ListClusters (their nodes are not EC2 instances of the account, so no tag finds them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fmdoctor.engine.discovery import PAGE_SIZE

TAGGED = "tagged"
HYPERPOD = "hyperpod"
HYPERPOD_PAGE_SIZE = 100
IAM_ACTIONS = ("ec2:DescribeInstances", "sagemaker:ListClusters")


@dataclass(frozen=True)
class DiscoveredCluster:
    name: str
    kinds: tuple[str, ...]  # how it was found: "tagged", "hyperpod" or both
    instances: int = 0  # running/pending EC2 instances carrying the name under a configured key
    tag_keys: tuple[str, ...] = ()  # which of the configured keys carry it


def clusters_from_instances(instances: Iterable[dict[str, Any]], tag_keys: Sequence[str]) -> list[DiscoveredCluster]:
    """Group DescribeInstances instances by the cluster names their configured tag keys carry.

    An instance tagged ``parallelcluster:cluster-name=a`` and ``fmdoctor:cluster=a`` counts once for
    ``a``; one tagged with two different names belongs to both (``fmdoctor check`` would find it in either).
    """
    keys = list(dict.fromkeys(tag_keys))
    counts: dict[str, int] = {}
    found_by: dict[str, set[str]] = {}
    for raw in instances:
        tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}
        names = {tags[k] for k in keys if tags.get(k)}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
            found_by.setdefault(name, set()).update(k for k in keys if tags.get(k) == name)
    return [
        DiscoveredCluster(name, (TAGGED,), counts[name], tuple(k for k in keys if k in found_by[name]))
        for name in sorted(counts)
    ]


def merge_hyperpod(tagged: list[DiscoveredCluster], hyperpod_names: Iterable[str]) -> list[DiscoveredCluster]:
    by_name = {c.name: c for c in tagged}
    for name in hyperpod_names:
        known = by_name.get(name)
        if known:
            by_name[name] = DiscoveredCluster(name, (*known.kinds, HYPERPOD), known.instances, known.tag_keys)
        else:
            by_name[name] = DiscoveredCluster(name, (HYPERPOD,))
    return [by_name[n] for n in sorted(by_name)]


def fetch_tagged_instances(ec2: Any, tag_keys: Sequence[str]) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "tag-key", "Values": list(dict.fromkeys(tag_keys))},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
        PaginationConfig={"PageSize": PAGE_SIZE},
    )
    return [i for page in pages for r in page.get("Reservations", []) for i in r.get("Instances", [])]


def fetch_hyperpod_clusters(sagemaker: Any) -> list[str]:
    """Names of the HyperPod clusters that exist (failed and deleting ones cannot be checked)."""
    names = []
    pages = sagemaker.get_paginator("list_clusters").paginate(PaginationConfig={"PageSize": HYPERPOD_PAGE_SIZE})
    for page in pages:
        for summary in page.get("ClusterSummaries", []):
            if summary.get("ClusterStatus") not in {"Failed", "Deleting"}:
                names.append(summary["ClusterName"])
    return names


def discover(aws: Any, tag_keys: Sequence[str], hyperpod: bool = True) -> list[DiscoveredCluster]:
    """Every cluster of the session's account and region: 1 call per 1,000 instances (+1 per 100 HyperPods)."""
    clusters = clusters_from_instances(fetch_tagged_instances(aws.client("ec2"), tag_keys), tag_keys)
    if hyperpod:
        clusters = merge_hyperpod(clusters, fetch_hyperpod_clusters(aws.client("sagemaker")))
    return clusters
