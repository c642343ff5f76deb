"""The inference signals of a run: every metric the inference checks read, fetched once and shared.

One loader builds the queries for every serving endpoint variant and every inference fleet node and
fetches them in one batched GetMetricData (ceil(queries / 500) calls), so six checks cost one call.

Where the numbers come from:
- endpoint variants (namespace ``AWS/SageMaker``, dimensions EndpointName + VariantName): ModelLatency
  and OverheadLatency (microseconds; p90/p99), Invocations, Invocation5XXErrors, InvocationModelErrors;
- endpoint instances (``/aws/sagemaker/Endpoints``): GPUUtilization and GPUMemoryUtilization, which
  SageMaker sums over an instance's GPUs (0-400 % on 4 GPUs) and averages over the variant's instances;
  Neuron endpoints: ``gpu.neuron_utilization_metric`` in ``gpu.neuron_namespace`` with the same dimensions;
- fleet nodes (dimension InstanceId): ``inference.latency_metric`` (p90/p99, SampleCount = requests) and
  the CloudWatch agent's GPU metrics (``gpu.*``, aggregated by InstanceId) or neuron-monitor's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fmdoctor.engine.check import NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.discovery import INSTANCE_TYPES_MAX, instance_type_info
from fmdoctor.engine.endpoints import Endpoint, EndpointVariant
from fmdoctor.engine.inventory import ENDPOINTS, INSTANCES, InstanceTypeInfo, chunked
from fmdoctor.inference.metrics import MetricQuery, Window, fetch_metrics, window_ending

# The inventory parts the inference checks read (Check.inventory): the endpoints, and for the checks that
# also judge an EC2/EKS inference fleet, the instances with their types.
ENDPOINT_PARTS = frozenset({ENDPOINTS})
FLEET_PARTS = frozenset({ENDPOINTS, INSTANCES})
# What endpoint discovery calls (in the inventory step): every inference check needs them.
DISCOVERY_ACTIONS = ("tag:GetResources", "sagemaker:ListEndpoints", "sagemaker:DescribeEndpoint",
                     "sagemaker:DescribeEndpointConfig")
# ... and what the checks that weigh accelerators read on top.
LOAD_ACTIONS = (*DISCOVERY_ACTIONS, "cloudwatch:GetMetricData", "ec2:DescribeInstanceTypes", "ec2:DescribeInstances")
SAGEMAKER_NAMESPACE = "AWS/SageMaker"
ENDPOINT_INSTANCE_NAMESPACE = "/aws/sagemaker/Endpoints"
# Statuses in which an endpoint serves traffic (an update keeps the old fleet serving until it is done).
SERVING = frozenset({"InService", "Updating", "SystemUpdating", "RollingBack", "UpdateRollbackFailed"})
NEURON_FAMILIES = ("inf", "trn")  # Inferentia and Trainium instance families
US_PER = {"microseconds": 1.0, "milliseconds": 1000.0, "seconds": 1_000_000.0}

# Signals of an endpoint variant: (signal, metric, statistic)
VARIANT_METRICS = (
    ("model_p90", "ModelLatency", "p90"),
    ("model_p99", "ModelLatency", "p99"),
    ("overhead_p90", "OverheadLatency", "p90"),
    ("overhead_p99", "OverheadLatency", "p99"),
    ("invocations", "Invocations", "Sum"),
    ("errors_5xx", "Invocation5XXErrors", "Sum"),
    ("model_errors", "InvocationModelErrors", "Sum"),
)
GPU_VARIANT_METRICS = (("gpu_util", "GPUUtilization", "Average"), ("gpu_memory", "GPUMemoryUtilization", "Average"))


@dataclass(frozen=True)
class Signals:
    window: Window
    values: dict[tuple[str, ...], float]

    def get(self, target: str, signal: str) -> float | None:
        """``target`` is a variant resource (endpoint/E/variant/V) or an instance id."""
        return self.values.get((target, signal))


def is_neuron_type(instance_type: str | None) -> bool:
    family = (instance_type or "").removeprefix("ml.").split(".")[0]
    return family.startswith(NEURON_FAMILIES)


def looks_accelerated(instance_type: str) -> bool:
    """GPU (g*, p*) or Neuron families by AWS's naming, for types EC2 does not describe."""
    family = instance_type.removeprefix("ml.").split(".")[0]
    return family.startswith(("g", "p", *NEURON_FAMILIES))


def serving_variants(ctx: CheckContext) -> Iterator[tuple[Endpoint, EndpointVariant]]:
    for endpoint in ctx.inventory.endpoints:
        if endpoint.status in SERVING:
            for variant in endpoint.variants:
                yield endpoint, variant


def signals(ctx: CheckContext) -> Signals:
    """This run's inference metrics, fetched by the first check that asks."""
    return ctx.shared("inference.signals", lambda: _load(ctx))


def _load(ctx: CheckContext) -> Signals:
    window = window_ending(ctx.now, ctx.settings.inference.window)
    queries = [*_variant_queries(ctx), *_fleet_queries(ctx)]
    values = fetch_metrics(ctx.client("cloudwatch"), queries, window) if queries else {}
    return Signals(window, values)


def _variant_queries(ctx: CheckContext) -> Iterator[MetricQuery]:
    gpu = ctx.settings.gpu
    for endpoint, variant in serving_variants(ctx):
        target = endpoint.variant_resource(variant)
        dims = (("EndpointName", endpoint.name), ("VariantName", variant.name))
        for signal, metric, stat in VARIANT_METRICS:
            yield MetricQuery((target, signal), SAGEMAKER_NAMESPACE, metric, dims, stat)
        if variant.serverless:
            continue
        if is_neuron_type(variant.instance_type):
            yield MetricQuery((target, "neuron_util"), gpu.neuron_namespace, gpu.neuron_utilization_metric, dims,
                              "Average")
            continue
        for signal, metric, stat in GPU_VARIANT_METRICS:
            yield MetricQuery((target, signal), ENDPOINT_INSTANCE_NAMESPACE, metric, dims, stat)


def _fleet_queries(ctx: CheckContext) -> Iterator[MetricQuery]:
    inference, gpu = ctx.settings.inference, ctx.settings.gpu
    for node in ctx.inventory.inference_nodes():
        dims = (("InstanceId", node.id),)
        if inference.latency_metric:
            namespace, metric = inference.latency_metric.rsplit("/", 1)
            for signal, stat in (("latency_p90", "p90"), ("latency_p99", "p99"), ("requests", "SampleCount")):
                yield MetricQuery((node.id, signal), namespace, metric, dims, stat)
        info = ctx.inventory.type_of(node)
        if info.neuron_devices:
            for signal, stat in (("neuron_util", "Average"), ("neuron_util_max", "Maximum")):
                yield MetricQuery((node.id, signal), gpu.neuron_namespace, gpu.neuron_utilization_metric, dims, stat)
        elif info.gpus:
            for signal, metric, stat in (
                ("gpu_util", gpu.utilization_metric, "Average"),
                ("gpu_util_max", gpu.utilization_metric, "Maximum"),
                ("gpu_memory_used", gpu.memory_used_metric, "Average"),
                ("gpu_memory_total", gpu.memory_total_metric, "Average"),
            ):
                yield MetricQuery((node.id, signal), gpu.namespace, metric, dims, stat)


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
    wanted = sorted({v.instance_type for e in ctx.inventory.endpoints for v in e.variants if v.instance_type})
    infos: dict[str, InstanceTypeInfo] = dict(ctx.inventory.instance_types)
    ec2 = ctx.client("ec2")
    for batch in chunked(wanted, INSTANCE_TYPES_MAX):
        by_ec2_name = {t.removeprefix("ml."): t for t in batch}
        # A filter, not InstanceTypes=: a SageMaker-only type must not fail the whole batch.
        for page in ec2.get_paginator("describe_instance_types").paginate(
            Filters=[{"Name": "instance-type", "Values": sorted(by_ec2_name)}]
        ):
            for raw in page.get("InstanceTypes", []):
                info = instance_type_info(raw)
                infos[by_ec2_name.get(info.name, info.name)] = info
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
