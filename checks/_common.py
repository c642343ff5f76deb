"""Small helpers several checks share (kept here so each check module stays a page long)."""

from __future__ import annotations

from collections.abc import Sequence

from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.hyperpod import HYPERPOD_CLUSTER, HYPERPOD_NODES, HyperPodCluster, HyperPodNode

SAMPLE = 10


def hyperpod_nodes_of(ctx: CheckContext, cluster: str) -> list[HyperPodNode]:
    """ListClusterNodes once per run, for every check that reads a HyperPod cluster's nodes."""
    return HYPERPOD_NODES.get(ctx, cluster)


def hyperpod_cluster_of(ctx: CheckContext, name: str) -> HyperPodCluster | None:
    """DescribeCluster once per run, for every check that reads a HyperPod cluster discovery did not describe
    (its failure, memoised too, reaches each of them)."""
    found = ctx.inventory.hyperpod
    if found is not None and found.name == name:
        return found
    return HYPERPOD_CLUSTER.get(ctx, name)


def sample(items: Sequence[str], limit: int = SAMPLE) -> list[str]:
    """At most ``limit`` ids for evidence; the full count goes beside it."""
    return list(items[:limit])


def plural(count: int, word: str, many: str | None = None) -> str:
    return f"{count} {word if count == 1 else (many or word + 's')}"


def id_list(ids: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def nodes_phrase(count: int) -> str:
    """'1 node has' / '3 nodes have': subject and verb agree in generated summaries."""
    return f"{plural(count, 'node')} {'has' if count == 1 else 'have'}"
