"""The inference signals of a run: every metric the inference checks read, fetched once and shared.

One loader builds the queries for every serving endpoint variant, inference component and inference fleet
node and fetches them in one batched GetMetricData (ceil(queries / 500) calls), so six checks cost one call
(plus one ListMetrics sweep per GPU/Neuron metric name when the target has fleet nodes, and one more
GetMetricData for the minute-by-minute queue of asynchronous endpoints, when there are any).

Where the numbers come from:
- endpoint variants and inference components: the metrics SageMaker publishes for their kind
  (:mod:`fmdoctor.inference.kinds`: real-time, asynchronous, serverless, inference components);
- endpoint instances (``/aws/sagemaker/Endpoints``): GPUUtilization and GPUMemoryUtilization, which
  SageMaker sums over an instance's GPUs (0-400 % on 4 GPUs) and averages over the variant's instances;
  Neuron endpoints: ``gpu.neuron_utilization_metric`` in ``gpu.neuron_namespace`` with the same dimensions;
- fleet nodes: ``inference.latency_metric`` (dimension InstanceId; p90/p99, SampleCount = requests) and the
  GPU metrics (``gpu.*``: the CloudWatch agent's, Container Insights'...) or neuron-monitor's, whose series
  are discovered with ListMetrics like the training cluster's (:mod:`fmdoctor.metrics.nodes`) and folded
  into one value per node: the mean over its GPUs, or the busiest for a Maximum. With ``metrics.url`` set
  (``metrics.source`` prometheus, or auto for the GPU nodes CloudWatch has no series for), the fleet's GPU load
  is read from that Prometheus API instead: the DCGM exporter's utilization and framebuffer over the window,
  one query per metric and statistic for the whole fleet (:func:`fmdoctor.metrics.dcgm.fleet_load`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from fmdoctor.engine.check import NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.discovery import DISCOVERY_IAM_ACTIONS
from fmdoctor.engine.endpoint_details import InferenceComponent
from fmdoctor.engine.endpoints import Endpoint, EndpointVariant
from fmdoctor.engine.errors import AwsFailure, ConfigError, describe_aws_failure
from fmdoctor.engine.inventory import ENDPOINTS, INSTANCES, InstanceTypeInfo
from fmdoctor.inference import kinds
from fmdoctor.inference.metrics import MetricQuery, Window, combine, fetch_metrics, fetch_series, window_ending
from fmdoctor.metrics.dcgm import fleet_load
from fmdoctor.metrics.identity import NodeIndex
from fmdoctor.metrics.nodes import (
    GPU,
    NEURON,
    NodeOwners,
    QueryPlan,
    accelerator_specs,
    fleet_identities,
    kind_of,
    plan_queries,
    shared_lister,
)
from fmdoctor.metrics.prometheus import PrometheusClient
from fmdoctor.metrics.source import count_calls
from fmdoctor.metrics.source import endpoint as prometheus_endpoint
from fmdoctor.metrics.targets import sagemaker_instance_types

# The inventory parts the inference checks read (Check.inventory): the endpoints, and for the checks that
# also judge an EC2/EKS inference fleet, the instances with their types.
ENDPOINT_PARTS = frozenset({ENDPOINTS})
FLEET_PARTS = frozenset({ENDPOINTS, INSTANCES})
# What endpoint discovery calls (in the inventory step): every inference check needs them.
DISCOVERY_ACTIONS = DISCOVERY_IAM_ACTIONS[ENDPOINTS]
# ... and what reading the shared signals costs (ListMetrics finds the fleet nodes' GPU/Neuron series; with
# metrics.url an Amazon Managed Service for Prometheus workspace, aps:QueryMetrics reads their DCGM series).
SIGNAL_ACTIONS = (*DISCOVERY_ACTIONS, "cloudwatch:ListMetrics", "cloudwatch:GetMetricData", "ec2:DescribeInstances",
                  "aps:QueryMetrics")
LOAD_ACTIONS = (*SIGNAL_ACTIONS, "ec2:DescribeInstanceTypes")
# Statuses in which an endpoint serves traffic (an update keeps the old fleet serving until it is done).
SERVING = frozenset({"InService", "Updating", "SystemUpdating", "RollingBack", "UpdateRollbackFailed"})
NEURON_FAMILIES = ("inf", "trn")  # Inferentia and Trainium instance families
US_PER = {"microseconds": 1.0, "milliseconds": 1000.0, "seconds": 1_000_000.0}

# Fleet nodes: the statistics asked of each discovered series, and the signal each becomes.
FLEET_STATS = {"utilization": ("Average", "Maximum"), "memory_used": ("Average",), "memory_total": ("Average",)}
FLEET_SIGNALS = {
    (GPU, "utilization", "Average"): "gpu_util",
    (GPU, "utilization", "Maximum"): "gpu_util_max",
    (GPU, "memory_used", "Average"): "gpu_memory_used",
    (GPU, "memory_total", "Average"): "gpu_memory_total",
    (NEURON, "utilization", "Average"): "neuron_util",
    (NEURON, "utilization", "Maximum"): "neuron_util_max",
    (NEURON, "memory_used", "Average"): "neuron_memory_used",
    (NEURON, "memory_total", "Average"): "neuron_memory_total",
}


@dataclass(frozen=True)
class Signals:
    window: Window
    values: dict[tuple[str, ...], float]
    # Why the fleet nodes' GPU/Neuron series could not be listed (ListMetrics denied...): the endpoints'
    # signals and the fleet's latency are still read; only the fleet's accelerator load is unknown.
    fleet_failure: AwsFailure | None = None
    # Minute-by-minute values (oldest first) of the asynchronous endpoints' queues, by (endpoint/E, signal).
    series: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    prometheus_url: str | None = None  # the Prometheus API the fleet nodes below were read from
    from_prometheus: frozenset[str] = frozenset()

    def source_of(self, node: str) -> dict[str, str]:
        """Evidence of where a fleet node's load was read, when that was not CloudWatch."""
        if node in self.from_prometheus and self.prometheus_url:
            return {"source": "prometheus", "prometheus_url": self.prometheus_url}
        return {}

    def get(self, target: str, signal: str) -> float | None:
        """``target`` is a variant resource (endpoint/E/variant/V), an inference component
        (inference-component/C) or an instance id."""
        return self.values.get((target, signal))

    def minutes(self, target: str, signal: str) -> list[float]:
        """An asynchronous endpoint's (endpoint/E) queue signal, minute by minute; empty when unpublished."""
        return self.series.get((target, signal), [])


def is_neuron_type(instance_type: str | None) -> bool:
    family = (instance_type or "").removeprefix("ml.").split(".")[0]
    return family.startswith(NEURON_FAMILIES)


def looks_accelerated(instance_type: str) -> bool:
    """GPU (g*, p*) or Neuron families by AWS's naming, for types EC2 does not describe."""
    family = instance_type.removeprefix("ml.").split(".")[0]
    return family.startswith(("g", "p", *NEURON_FAMILIES))


def serving_endpoints(ctx: CheckContext) -> Iterator[Endpoint]:
    return (e for e in ctx.inventory.endpoints if e.status in SERVING)


def serving_variants(ctx: CheckContext) -> Iterator[tuple[Endpoint, EndpointVariant]]:
    for endpoint in serving_endpoints(ctx):
        for variant in endpoint.variants:
            yield endpoint, variant


def serving_components(ctx: CheckContext) -> Iterator[tuple[Endpoint, InferenceComponent]]:
    """The inference components of serving endpoints that are in service themselves."""
    for endpoint in serving_endpoints(ctx):
        for component in endpoint.components:
            if component.status in SERVING:
                yield endpoint, component


def signals(ctx: CheckContext) -> Signals:
    """This run's inference metrics, fetched by the first check that asks."""
    return ctx.shared("inference.signals", lambda: _load(ctx))


def _load(ctx: CheckContext) -> Signals:
    window = window_ending(ctx.now, ctx.settings.inference.window)
    plan, failure = QueryPlan((), (), (), {}), None
    try:
        if ctx.settings.metrics.source != "prometheus":
            plan = _fleet_plan(ctx)  # ListMetrics: the series the fleet's nodes really publish
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
    device_queries = []
    for n, ((i, who, device), query) in enumerate(zip(plan.keys, plan.queries, strict=True)):
        spec, series = plan.specs[i], query.series
        signal = FLEET_SIGNALS[(spec.kind, spec.role, spec.stat)]
        device_queries.append(MetricQuery((who, signal, device, str(n)), series.namespace, series.name,
                                          series.dimensions, query.stat))
    queries = [*_variant_queries(ctx), *_latency_queries(ctx), *device_queries]
    cloudwatch = ctx.client("cloudwatch")
    values = fetch_metrics(cloudwatch, queries, window) if queries else {}
    queue = [q for e in serving_endpoints(ctx) if e.asynchronous for q in kinds.queue_queries(e)]
    series = fetch_series(cloudwatch, queue, window) if queue else {}
    per_node = _per_node(values, {q.key: q.stat for q in device_queries})
    prometheus, url, failed = _prometheus_fleet(ctx, window, per_node)
    return Signals(window, {**per_node, **prometheus}, failure or failed, {(k[0], k[1]): v for k, v in series.items()},
                   url, frozenset(node for node, _ in prometheus))


def _prometheus_fleet(ctx: CheckContext, window: Window, found: dict[tuple[str, ...], float]
                      ) -> tuple[dict[tuple[str, str], float], str | None, AwsFailure | None]:
    """The GPU fleet nodes' load from metrics.url, for the nodes CloudWatch gave none (all of them with source
    prometheus); nothing when no Prometheus is configured."""
    metrics = ctx.settings.metrics
    if not metrics.url or metrics.source == "cloudwatch":
        return {}, None, None
    nodes = [n for n in ctx.inventory.inference_nodes()
             if kind_of(ctx.inventory.type_of(n)) == GPU and (n.id, "gpu_util") not in found]
    if not nodes:
        return {}, None, None
    aws = ctx.scope.aws
    try:
        where = prometheus_endpoint(metrics.url, metrics.auth, metrics.token_env,
                                    aws.session.get_credentials() if aws else None, ctx.region)
        client = PrometheusClient(where, count_calls(aws, ctx.scope.queries))
        index = NodeIndex(fleet_identities(ctx.inventory, nodes, ctx.settings.gpu))
        return fleet_load(client, index, window.start, window.end), where.url, None
    except ConfigError as exc:
        return {}, None, AwsFailure("ConfigError", str(exc), None, "bad-input")
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        return {}, None, failure


def _per_node(values: dict[tuple[str, ...], float], stats: dict[tuple[str, ...], str]) -> dict[tuple[str, ...], float]:
    """Per-series answers folded into one value per node and signal: first the series of one device (an
    agent that renamed its host publishes two), then the node's devices, by the signal's statistic (the mean
    GPU for an Average, the busiest for a Maximum)."""
    per_device: dict[tuple[str, ...], list[float]] = {}
    per_node: dict[tuple[str, ...], list[float]] = {}
    stat_of: dict[tuple[str, ...], str] = {}
    for key, value in values.items():
        if key in stats:
            per_device.setdefault(key[:3], []).append(value)
            stat_of[key[:2]] = stats[key]
    for key, found in per_device.items():
        per_node.setdefault(key[:2], []).append(combine(stat_of[key[:2]], found))
    plain = {k: v for k, v in values.items() if k not in stats}
    return {**plain, **{k: combine(stat_of[k], found) for k, found in per_node.items()}}


def _variant_queries(ctx: CheckContext) -> Iterator[MetricQuery]:
    gpu = ctx.settings.gpu
    for endpoint, variant in serving_variants(ctx):
        yield from kinds.variant_queries(endpoint, variant)
        if kinds.kind_of(endpoint, variant) in (kinds.SERVERLESS, kinds.COMPONENTS):
            continue  # serverless: no instances; components: their accelerators are read per component
        target, dims = endpoint.variant_resource(variant), kinds.variant_dims(endpoint, variant)
        if is_neuron_type(variant.instance_type):
            yield MetricQuery((target, "neuron_util"), gpu.neuron_namespace, gpu.neuron_utilization_metric, dims,
                              "Average")
            continue
        for signal, namespace, metric, stat in kinds.GPU_INSTANCE:
            yield MetricQuery((target, signal), namespace, metric, dims, stat)
    for endpoint in serving_endpoints(ctx):
        yield from kinds.component_queries(endpoint)


def _latency_queries(ctx: CheckContext) -> Iterator[MetricQuery]:
    """inference.latency_metric per fleet node: the user's own metric, published with InstanceId."""
    inference = ctx.settings.inference
    if not inference.latency_metric:
        return
    namespace, metric = inference.latency_metric.rsplit("/", 1)
    for node in ctx.inventory.inference_nodes():
        dims = (("InstanceId", node.id),)
        for signal, stat in (("latency_p90", "p90"), ("latency_p99", "p99"), ("requests", "SampleCount")):
            yield MetricQuery((node.id, signal), namespace, metric, dims, stat)


def _fleet_plan(ctx: CheckContext) -> QueryPlan:
    """The fleet nodes' GPU/Neuron series, discovered like the training cluster's (one ListMetrics sweep per
    metric name), whatever dimension set the CloudWatch agent or Container Insights gives them."""
    gpu = ctx.settings.gpu
    kinds = {n.id: kind_of(ctx.inventory.type_of(n)) for n in ctx.inventory.inference_nodes()}
    nodes = NodeOwners([n for n in ctx.inventory.inference_nodes() if kinds[n.id]], kinds, gpu)
    specs = accelerator_specs(gpu, {k for k in kinds.values() if k}, FLEET_STATS)
    cloudwatch = ctx.client("cloudwatch")
    lister = shared_lister(cloudwatch, ctx.inventory, ctx.settings, ctx.shared)  # shared with the GPU checks
    return plan_queries(cloudwatch, specs, nodes.owner, nodes.narrow, lambda spec: gpu.device_dimensions,
                        ctx.settings.inference.window, lister)


def fleet_load_readable(ctx: CheckContext, sig: Signals, what: str) -> bool:
    """False, with an error entry for ``what``, when the fleet's GPU/Neuron series could not be listed."""
    failure = sig.fleet_failure
    if failure is None:
        return True
    ctx.unverified(what, failure.code, failure.message, failure.iam_action)
    return False


def latency_metric_unpublished(ctx: CheckContext, sig: Signals) -> str | None:
    """Why the fleet's latency cannot be read, when ``inference.latency_metric`` is set and no fleet node
    published it in the window; None otherwise.

    A server that publishes nothing without traffic makes one silent node idle, but every node silent is
    far likelier a wrong name, namespace or dimension: reading that as zero requests would call the whole
    fleet idle (and its latency healthy).
    """
    metric = ctx.settings.inference.latency_metric
    nodes = ctx.inventory.inference_nodes()
    if not metric or not nodes or any(sig.get(n.id, "requests") is not None for n in nodes):
        return None
    return (f"no inference node published {metric} (dimension InstanceId) in the window; check "
            "inference.latency_metric and that the model server publishes it")


def signals_or_none(ctx: CheckContext, unverified: str) -> Signals | None:
    """The shared signals, or None with an error entry when CloudWatch could not be read."""
    with ctx.guard(unverified):
        return signals(ctx)
    return None


def instance_types_or_none(ctx: CheckContext, unverified: str) -> dict[str, InstanceTypeInfo] | None:
    with ctx.guard(unverified):
        return instance_types(ctx)
    return None


def latency_ms(value_in_unit: float | None, unit: str) -> float | None:
    """A latency in ``unit`` (CloudWatch's ModelLatency is in microseconds) as milliseconds."""
    return None if value_in_unit is None else value_in_unit * US_PER[unit] / 1000.0


def instance_types(ctx: CheckContext) -> dict[str, InstanceTypeInfo]:
    """Accelerator facts of the endpoints' ``ml.*`` types (from EC2's own catalogue) and the fleet's types."""
    return ctx.shared("inference.instance_types", lambda: _load_types(ctx))


def _load_types(ctx: CheckContext) -> dict[str, InstanceTypeInfo]:
    wanted = {v.instance_type for e in ctx.inventory.endpoints for v in e.variants if v.instance_type}
    infos: dict[str, InstanceTypeInfo] = dict(ctx.inventory.instance_types)
    infos.update(sagemaker_instance_types(ctx.client("ec2"), wanted))
    return infos


def report_discovery_gaps(ctx: CheckContext) -> None:
    """What endpoint discovery could not read is unverified for every inference check."""
    for gap in ctx.inventory.endpoint_gaps:
        ctx.unverified(gap.unverified, gap.failure.code, gap.failure.message, gap.failure.iam_action)


def targets_or_skip(ctx: CheckContext, *, fleet: bool = True) -> None:
    """Raise NotApplicable when the target has no endpoints (and no fleet nodes) and nothing went unread."""
    report_discovery_gaps(ctx)
    has_fleet = fleet and bool(ctx.inventory.inference_nodes())
    if not ctx.inventory.endpoints and not has_fleet and not ctx.inventory.endpoint_gaps:
        where = "no SageMaker endpoints" + (" and no inference fleet nodes (fmdoctor:role=inference)" if fleet else "")
        raise NotApplicable(where)


def signals_and_types(ctx: CheckContext, what: str) -> tuple[Signals, dict[str, InstanceTypeInfo]] | None:
    """Skip a target with nothing to check; else the shared signals and instance types, or None (with an
    error entry) when either could not be read."""
    targets_or_skip(ctx)
    sig = signals_or_none(ctx, f"{what} (CloudWatch GetMetricData)")
    types = instance_types_or_none(ctx, "accelerators of the endpoints' instance types (DescribeInstanceTypes)")
    return (sig, types) if sig is not None and types is not None else None
