"""The GPU and EFA-counter checks' nodes and metrics for one run: the cluster's EC2 instances and its SageMaker
HyperPod nodes, read from CloudWatch and/or a Prometheus API (``metrics.*``), fetched once and shared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fmdoctor.engine.check import ACCELERATOR_METRICS
from fmdoctor.engine.context import CheckContext, RunStart
from fmdoctor.engine.errors import AwsFailure, ConfigError, describe_aws_failure
from fmdoctor.engine.hyperpod import HyperPodCluster
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
        types = sagemaker_instance_types(ctx.client("ec2"), {n.instance_type for n in listed})
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
    return ctx.shared("metrics.sources", lambda: _plan(ctx))


def _plan(ctx: CheckContext) -> Sources:
    aws = ctx.scope.aws
    try:
        return plan_sources(ctx.settings, metric_targets(ctx).hyperpod, lambda: ctx.client("eks"),
                            lambda: aws.session.get_credentials() if aws else None, ctx.region,
                            lambda: ctx.client("sagemaker"))
    except ConfigError as exc:  # e.g. auth: bearer with its token_env unset: every check says so, not a crash
        raise PrometheusFailed(AwsFailure("ConfigError", str(exc), None, "bad-input"), "the metrics settings") from None


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


def start_metric_listings(run: RunStart) -> None:
    """Registry starter: the CloudWatch listings of the metric families the run's checks read, begun before its
    inventory (fmdoctor.metrics.nodes.start_listings); none when the metrics are read from Prometheus only."""
    if run.settings.metrics.source == "prometheus":
        return
    start_listings(run.aws.client("cloudwatch"), run.settings, run.metrics, run.inventory, run.shared.get)


def _counter(ctx: CheckContext) -> Callable[[str, str], None]:
    return count_calls(ctx.scope.aws, ctx.scope.queries)
