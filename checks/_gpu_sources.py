"""The GPU and EFA-counter checks' nodes and metrics for one run: the cluster's EC2 instances and its SageMaker
HyperPod nodes, read from CloudWatch and/or a Prometheus API (``metrics.*``), fetched once and shared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fmdoctor.engine.check import ACCELERATOR_METRICS
from fmdoctor.engine.context import CheckContext, RunStart
from fmdoctor.engine.errors import AwsFailure, ConfigError, describe_aws_failure
from fmdoctor.engine.hyperpod import HYPERPOD_CLUSTER, HYPERPOD_NODES, HyperPodCluster
from fmdoctor.engine.inventory import InstanceTypeInfo
from fmdoctor.engine.prefetch import EarlyLoad
from fmdoctor.metrics.cloudwatch import ListingRun
from fmdoctor.metrics.cluster import ClusterMetrics, load_cloudwatch
from fmdoctor.metrics.nodes import efa_interfaces as inventory_efa_interfaces
from fmdoctor.metrics.nodes import run_listings, shared_lister, start_listings
from fmdoctor.metrics.prometheus import PrometheusClient, PrometheusFailed
from fmdoctor.metrics.source import Sources, count_calls, load_metrics, plan_sources
from fmdoctor.metrics.targets import MetricNode, ec2_nodes, hyperpod_nodes, sagemaker_instance_types

from ._common import hyperpod_cluster_of, hyperpod_nodes_of

METRICS_KEY = "cloudwatch.cluster-metrics"
# Every call a run of the GPU/EFA-counter checks may make: the inventory's, CloudWatch's, the HyperPod node
# listing, the HyperPod observability add-on's (EKS) or extension's (Slurm) configuration and Amazon Managed
# Service for Prometheus's query APIs (aps:GetSeries is what the runbooks' by-hand series query needs).
IAM_ACTIONS = ("ec2:DescribeInstances", "ec2:DescribeInstanceTypes", "cloudwatch:ListMetrics",
               "cloudwatch:GetMetricData", "sagemaker:DescribeCluster", "sagemaker:ListClusterNodes",
               "eks:DescribeAddon", "sagemaker:ListClusterExtensions", "sagemaker:DescribeClusterExtension",
               "aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries")


def _node_types(start: RunStart, cluster: str) -> dict[str, InstanceTypeInfo]:
    """The accelerator facts of a HyperPod cluster's node types (DescribeInstanceTypes after ListClusterNodes)."""
    listed = HYPERPOD_NODES.read(start, cluster)
    return sagemaker_instance_types(start.client("ec2"), {n.instance_type for n in listed})


def _sources(start: RunStart, cluster: str) -> Sources:
    """The metric sources for the run's HyperPod cluster ``cluster`` ("" for none): its observability add-on's or
    extension's workspace, looked up once (plan_sources)."""
    hyperpod = HYPERPOD_CLUSTER.read(start, cluster) if cluster else None
    aws = start.aws
    try:
        return plan_sources(start.settings, hyperpod, lambda: start.client("eks"),
                            lambda: aws.session.get_credentials() if aws else None, start.region,
                            lambda: start.client("sagemaker"))
    except ConfigError as exc:  # e.g. auth: bearer with its token_env unset: every check says so, not a crash
        raise PrometheusFailed(AwsFailure("ConfigError", str(exc), None, "bad-input"), "the metrics settings") from None


def _configured_hyperpod(start: RunStart) -> list[str]:
    return [start.settings.hyperpod.cluster_name] if start.settings.hyperpod.cluster_name else []


HYPERPOD_NODE_TYPES: EarlyLoad[dict[str, InstanceTypeInfo]] = EarlyLoad(
    "metrics.hyperpod-types", _node_types, ("sagemaker:ListClusterNodes", "ec2:DescribeInstanceTypes"),
    _configured_hyperpod, regional=True)
METRIC_SOURCES: EarlyLoad[Sources] = EarlyLoad(
    "metrics.sources", _sources, ("sagemaker:DescribeCluster", "eks:DescribeAddon", "sagemaker:ListClusterExtensions",
                                  "sagemaker:DescribeClusterExtension"), _configured_hyperpod)


def _begin_listings(start: RunStart, _: str) -> list[ListingRun]:
    """The CloudWatch listings of the metric families the run's checks read, begun before its inventory is read
    and told by it which nodes are ours (fmdoctor.metrics.nodes.start_listings); none when the metrics are read
    from Prometheus only, or for a run that has no inventory to tell them."""
    if start.settings.metrics.source == "prometheus" or start.inventory is None:
        return []
    return start_listings(start.client("cloudwatch"), start.settings, start.metrics, start.inventory,
                          start.shared.get)


METRIC_LISTINGS: EarlyLoad[list[ListingRun]] = EarlyLoad("cloudwatch.early-listings", _begin_listings,
                                                         ("cloudwatch:ListMetrics",))
# What the GPU and EFA-counter checks read before the inventory is in: a configured HyperPod cluster, its nodes
# and their types, where its metrics are, and the CloudWatch listings of their metric names.
PREFETCH = (HYPERPOD_CLUSTER, HYPERPOD_NODES, HYPERPOD_NODE_TYPES, METRIC_SOURCES, METRIC_LISTINGS)


@dataclass(frozen=True)
class Targets:
    """The accelerated nodes to judge, and the HyperPod cluster among them that could not be listed."""

    nodes: tuple[MetricNode, ...]
    hyperpod: HyperPodCluster | None = None
    hyperpod_name: str | None = None
    hyperpod_failure: AwsFailure | None = None


def metric_targets(ctx: CheckContext) -> Targets:
    return ctx.shared("metrics.targets", lambda: _targets(ctx))


def _targets(ctx: CheckContext) -> Targets:
    nodes = ec2_nodes(ctx.inventory, ctx.settings.gpu.hostname_tags)
    name = ctx.inventory.hyperpod.name if ctx.inventory.hyperpod else ctx.settings.hyperpod.cluster_name
    if not name:
        return Targets(tuple(nodes))
    try:
        cluster = ctx.inventory.hyperpod or hyperpod_cluster_of(ctx, name)
        if cluster is None:
            return Targets(tuple(nodes), hyperpod_name=name)
        listed = hyperpod_nodes_of(ctx, cluster.name)
        types = HYPERPOD_NODE_TYPES.get(ctx, cluster.name)
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        return Targets(tuple(nodes), hyperpod_name=name, hyperpod_failure=failure)
    return Targets(tuple(nodes + hyperpod_nodes(cluster.name, listed, types)), cluster, cluster.name)


def efa_interfaces(ctx: CheckContext) -> dict[str, str]:
    """Every EFA interface of a running compute instance -> that instance."""
    return inventory_efa_interfaces(ctx.inventory)


def cluster_metrics(ctx: CheckContext) -> ClusterMetrics:
    """The run's one metrics snapshot (CloudWatch's ListMetrics + batched GetMetricData, then one Prometheus
    query_range per metric for what CloudWatch lacks), shared by every check."""
    return ctx.shared(METRICS_KEY, lambda: _load(ctx))


def metric_sources(ctx: CheckContext) -> Sources:
    """The run's metric sources (metrics.*; for auto, a HyperPod observability add-on's workspace looked up once)."""
    hyperpod = metric_targets(ctx).hyperpod
    return METRIC_SOURCES.get(ctx, hyperpod.name if hyperpod else "")


def _load(ctx: CheckContext) -> ClusterMetrics:
    targets = metric_targets(ctx)
    settings = ctx.settings
    sources = metric_sources(ctx)
    nodes = list(targets.nodes)
    accelerators = wants_accelerators(ctx.scope.metrics, nodes, sources)

    def cloudwatch() -> ClusterMetrics:
        client = ctx.client("cloudwatch")
        lister = shared_lister(client, ctx.inventory, settings, ctx.shared)  # the inference fleet's listings too
        return load_cloudwatch(client, nodes, efa_interfaces(ctx), settings.gpu, ctx.now, lister, accelerators,
                               run_listings(client, settings.gpu.window, ctx.shared))

    client = None
    if sources.prometheus is not None:
        client = PrometheusClient(sources.prometheus, _counter(ctx))
    efa_nodes = [n.id for n in nodes if n.efa]
    return load_metrics(nodes, sources, cloudwatch, client, settings, ctx.now, efa_nodes)


def wants_accelerators(families: frozenset[str] | None, nodes: list[MetricNode], sources: Sources) -> bool:
    """Whether the snapshot needs GPU/Neuron series: a check of the run reads them (Check.metrics), or the run
    does not say (None). Also, as a full snapshot reads them, when a node is HyperPod's (whether it has GPU
    series decides whether efa-errors calls its counters unseen) or a Prometheus completes CloudWatch (which
    nodes lack GPU series there decides what is asked of it): those runs stay as they were."""
    return (families is None or ACCELERATOR_METRICS in families or any(n.hyperpod for n in nodes)
            or sources.prometheus is not None)


def _counter(ctx: CheckContext) -> Callable[[str, str], None]:
    return count_calls(ctx.scope.aws, ctx.scope.queries)
