"""The kinds of SageMaker endpoint and the metrics AWS publishes for each, as its documentation lists them.

Each kind is judged only by the metrics SageMaker publishes for it; asking an asynchronous endpoint for
``Invocations`` finds nothing, and nothing is not zero. Sources (namespaces, dimensions, units):
- real-time: "SageMaker AI endpoint invocation metrics" and "SageMaker AI endpoint metrics" in
  docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html (``AWS/SageMaker`` and
  ``/aws/sagemaker/Endpoints``, dimensions EndpointName, VariantName; latencies in microseconds);
- asynchronous: docs.aws.amazon.com/sagemaker/latest/dg/async-inference-monitor.html, an exhaustive list:
  no Invocations, InvocationsPerInstance or OverheadLatency; ApproximateBacklogSize and
  ApproximateAgeOfOldestRequest (seconds) carry EndpointName alone, InvocationsProcessed, InvocationFailures
  and TimeInBacklog (microseconds) EndpointName and VariantName;
- serverless: docs.aws.amazon.com/sagemaker/latest/dg/serverless-endpoints-monitoring.html, also exhaustive:
  the invocation metrics plus ModelSetupTime (cold starts, microseconds) and
  ServerlessConcurrentExecutionsUtilization (concurrent executions / MaxConcurrency, 0-1); no GPU metrics;
- inference components: the InferenceComponentName dimension of the invocation metrics, and
  ``/aws/sagemaker/InferenceComponents`` (GPUUtilizationNormalized, GPUMemoryUtilizationNormalized: 0-100 %
  of what each copy reserved), "SageMaker AI inference component metrics" on the monitoring page.
"""

from __future__ import annotations

from collections.abc import Iterator

from fmdoctor.engine.endpoints import Endpoint, EndpointVariant
from fmdoctor.inference.metrics import MetricQuery

REAL_TIME = "real-time"
ASYNC = "async"
SERVERLESS = "serverless"
COMPONENTS = "inference-components"

SAGEMAKER_NAMESPACE = "AWS/SageMaker"
ENDPOINT_INSTANCE_NAMESPACE = "/aws/sagemaker/Endpoints"
COMPONENT_NAMESPACE = "/aws/sagemaker/InferenceComponents"

# (signal, namespace, metric, statistic) per kind, all with the dimensions of the target they describe.
REQUESTS = (
    ("invocations", SAGEMAKER_NAMESPACE, "Invocations", "Sum"),
    ("errors_5xx", SAGEMAKER_NAMESPACE, "Invocation5XXErrors", "Sum"),
    ("model_errors", SAGEMAKER_NAMESPACE, "InvocationModelErrors", "Sum"),
    ("model_p90", SAGEMAKER_NAMESPACE, "ModelLatency", "p90"),
    ("model_p99", SAGEMAKER_NAMESPACE, "ModelLatency", "p99"),
)
INVOCATIONS = (
    *REQUESTS,
    ("overhead_p90", SAGEMAKER_NAMESPACE, "OverheadLatency", "p90"),
    ("overhead_p99", SAGEMAKER_NAMESPACE, "OverheadLatency", "p99"),
)
GPU_INSTANCE = (
    ("gpu_util", ENDPOINT_INSTANCE_NAMESPACE, "GPUUtilization", "Average"),
    ("gpu_memory", ENDPOINT_INSTANCE_NAMESPACE, "GPUMemoryUtilization", "Average"),
)
ASYNC_VARIANT = (
    ("processed", SAGEMAKER_NAMESPACE, "InvocationsProcessed", "Sum"),
    ("failures", SAGEMAKER_NAMESPACE, "InvocationFailures", "Sum"),
    ("model_p90", SAGEMAKER_NAMESPACE, "ModelLatency", "p90"),
    ("backlog_time_p90", SAGEMAKER_NAMESPACE, "TimeInBacklog", "p90"),
)
# Endpoint-level queue metrics, read minute by minute (their trend and latest value are the async SLO).
ASYNC_QUEUE = (
    ("backlog", SAGEMAKER_NAMESPACE, "ApproximateBacklogSize", "Average"),
    ("oldest_age_s", SAGEMAKER_NAMESPACE, "ApproximateAgeOfOldestRequest", "Maximum"),
)
SERVERLESS_VARIANT = (
    *INVOCATIONS,
    ("cold_start_p90", SAGEMAKER_NAMESPACE, "ModelSetupTime", "p90"),
    ("cold_starts", SAGEMAKER_NAMESPACE, "ModelSetupTime", "SampleCount"),
    ("concurrency_max", SAGEMAKER_NAMESPACE, "ServerlessConcurrentExecutionsUtilization", "Maximum"),
)
COMPONENT = (
    *REQUESTS,
    ("concurrent_per_copy_max", SAGEMAKER_NAMESPACE, "ConcurrentRequestsPerCopy", "Maximum"),
    ("gpu_util", COMPONENT_NAMESPACE, "GPUUtilizationNormalized", "Average"),
    ("gpu_memory", COMPONENT_NAMESPACE, "GPUMemoryUtilizationNormalized", "Average"),
)
# What each kind is judged by, for the README and the evidence.
JUDGED_BY = {
    REAL_TIME: "ModelLatency, OverheadLatency, Invocations, Invocation5XXErrors, InvocationModelErrors, "
               "GPUUtilization",
    ASYNC: "ApproximateAgeOfOldestRequest, ApproximateBacklogSize, InvocationsProcessed, InvocationFailures",
    SERVERLESS: "ModelLatency, OverheadLatency, ModelSetupTime, Invocations, Invocation5XXErrors, "
                "InvocationModelErrors, ServerlessConcurrentExecutionsUtilization",
    COMPONENTS: "ModelLatency, Invocations, Invocation5XXErrors, InvocationModelErrors, GPUUtilizationNormalized "
                "(InferenceComponentName), copies",
}


def kind_of(endpoint: Endpoint, variant: EndpointVariant) -> str:
    if endpoint.asynchronous:
        return ASYNC
    if variant.serverless:
        return SERVERLESS
    if endpoint.hosts_components:
        return COMPONENTS
    return REAL_TIME


def variant_dims(endpoint: Endpoint, variant: EndpointVariant) -> tuple[tuple[str, str], ...]:
    return (("EndpointName", endpoint.name), ("VariantName", variant.name))


def variant_queries(endpoint: Endpoint, variant: EndpointVariant) -> Iterator[MetricQuery]:
    """The single-window queries of one variant, by its kind (accelerator queries are the caller's)."""
    kind = kind_of(endpoint, variant)
    metrics = {REAL_TIME: INVOCATIONS, ASYNC: ASYNC_VARIANT, SERVERLESS: SERVERLESS_VARIANT, COMPONENTS: ()}[kind]
    target, dims = endpoint.variant_resource(variant), variant_dims(endpoint, variant)
    for signal, namespace, metric, stat in metrics:
        yield MetricQuery((target, signal), namespace, metric, dims, stat)


def component_queries(endpoint: Endpoint) -> Iterator[MetricQuery]:
    for component in endpoint.components:
        dims = (("InferenceComponentName", component.name),)
        for signal, namespace, metric, stat in COMPONENT:
            yield MetricQuery((component.resource, signal), namespace, metric, dims, stat)


def queue_queries(endpoint: Endpoint) -> Iterator[MetricQuery]:
    """An asynchronous endpoint's queue metrics (dimension EndpointName alone), for the per-minute read."""
    for signal, namespace, metric, stat in ASYNC_QUEUE:
        yield MetricQuery((endpoint.resource, signal), namespace, metric, (("EndpointName", endpoint.name),), stat)
