"""Scenario builder for inference: SageMaker endpoints, their auto scaling and the metrics SageMaker publishes.

Plain boto3 calls that would work against real AWS (moto only lacks CloudWatch percentiles, which
``moto_compat`` adds). Latencies are published as distributions (``Values`` + ``Counts``, in
microseconds like SageMaker's own ModelLatency), so p90/p99 are computed from raw samples. Each kind of
endpoint gets exactly the metrics SageMaker documents for it, with their namespaces, dimensions and units
(fmdoctor.inference.kinds cites the pages): an asynchronous endpoint publishes no Invocations, a
serverless one no GPU metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import boto3

from fmdoctor.demo import moto_cloudwatch

ROLE_ARN = "arn:aws:iam::123456789012:role/fmdoctor-demo-sagemaker"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/huggingface-pytorch-tgi-inference:2.1-tgi1.4-gpu"
# The AWS Deep Learning Container for vLLM, and a plain PyTorch one (no LLM server: no memory reservation).
VLLM_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm:0.8.5-gpu-py312"
PYTORCH_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-inference:2.3.0-gpu-py311"
SAGEMAKER = "AWS/SageMaker"
ENDPOINT_INSTANCES = "/aws/sagemaker/Endpoints"
COMPONENTS = "/aws/sagemaker/InferenceComponents"
VARIANT_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
Distribution = Mapping[float, int]  # value -> how many samples per minute


@dataclass
class EndpointBuilder:
    session: boto3.Session
    cluster: str | None = None  # tag the endpoints with it (None: untagged, selected by name only)
    tag_key: str = "fmdoctor:cluster"
    # moto's CloudWatch backend when moto answers in this process: metrics go straight to it (MetricsPublisher's)
    metrics_backend: Any = None

    def __post_init__(self) -> None:
        self.sagemaker = self.session.client("sagemaker")
        self.cloudwatch = self.session.client("cloudwatch")
        self.autoscaling = self.session.client("application-autoscaling")

    def endpoint(self, name: str, instance_type: str, instances: int = 1,
                 variants: Sequence[str] = ("AllTraffic",), tags: Mapping[str, str] | None = None,
                 image: str = IMAGE, async_output: str | None = None, async_max_concurrency: int | None = None) -> str:
        """A model, an endpoint config with one variant per name, and the endpoint; returns its ARN.

        ``async_output`` (an S3 URI) makes it asynchronous: the config gets an AsyncInferenceConfig."""
        extra: dict[str, Any] = {}
        if async_output:
            client = {"MaxConcurrentInvocationsPerInstance": async_max_concurrency} if async_max_concurrency else {}
            extra["AsyncInferenceConfig"] = {"OutputConfig": {"S3OutputPath": async_output}, "ClientConfig": client}
        return self._deploy(name, image, [
            {"VariantName": v, "ModelName": f"{name}-model", "InstanceType": instance_type,
             "InitialInstanceCount": instances, "InitialVariantWeight": 1.0}
            for v in variants
        ], tags, extra)

    def serverless(self, name: str, memory_mb: int = 4096, max_concurrency: int = 5, image: str = PYTORCH_IMAGE,
                   tags: Mapping[str, str] | None = None) -> str:
        """A serverless endpoint (one variant, AllTraffic): compute launched per request, no instances."""
        return self._deploy(name, image, [{
            "VariantName": "AllTraffic", "ModelName": f"{name}-model",
            "ServerlessConfig": {"MemorySizeInMB": memory_mb, "MaxConcurrency": max_concurrency},
        }], tags, {})

    def _deploy(self, name: str, image: str, variants: list[dict[str, Any]], tags: Mapping[str, str] | None,
                extra: dict[str, Any]) -> str:
        self.sagemaker.create_model(ModelName=f"{name}-model", ExecutionRoleArn=ROLE_ARN,
                                    PrimaryContainer={"Image": image})
        self.sagemaker.create_endpoint_config(EndpointConfigName=f"{name}-config", ProductionVariants=variants, **extra)
        all_tags = {**({self.tag_key: self.cluster} if self.cluster else {}), **(tags or {})}
        return self.sagemaker.create_endpoint(  # type: ignore[no-any-return]
            EndpointName=name, EndpointConfigName=f"{name}-config",
            Tags=[{"Key": k, "Value": v} for k, v in all_tags.items()],
        )["EndpointArn"]

    def autoscale(self, name: str, min_capacity: int, max_capacity: int, variant: str = "AllTraffic",
                  invocations_per_instance: float = 70.0, backlog_per_instance: float | None = None) -> None:
        """A scalable target and the usual target-tracking policy: on invocations per instance, or for an
        asynchronous endpoint on ApproximateBacklogSizePerInstance (the policy async-inference-autoscale shows)."""
        resource = f"endpoint/{name}/variant/{variant}"
        self.autoscaling.register_scalable_target(
            ServiceNamespace="sagemaker", ResourceId=resource, ScalableDimension=VARIANT_DIMENSION,
            MinCapacity=min_capacity, MaxCapacity=max_capacity,
        )
        if backlog_per_instance is None:
            tracking: dict[str, Any] = {
                "TargetValue": invocations_per_instance,
                "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            }
        else:
            tracking = {"TargetValue": backlog_per_instance, "CustomizedMetricSpecification": {
                "MetricName": "ApproximateBacklogSizePerInstance", "Namespace": SAGEMAKER, "Statistic": "Average",
                "Dimensions": [{"Name": "EndpointName", "Value": name}]}}
        self.autoscaling.put_scaling_policy(
            PolicyName=f"{name}-scaling", ServiceNamespace="sagemaker", ResourceId=resource,
            ScalableDimension=VARIANT_DIMENSION, PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration=tracking,
        )

    def scale(self, name: str, instances: int, variant: str = "AllTraffic") -> None:
        """Set a variant's instance count, as auto scaling does (0 only for an asynchronous endpoint)."""
        self.sagemaker.update_endpoint_weights_and_capacities(
            EndpointName=name,
            DesiredWeightsAndCapacities=[{"VariantName": variant, "DesiredInstanceCount": instances}],
        )

    def traffic(
        self,
        name: str,
        now: datetime,
        *,
        variant: str = "AllTraffic",
        minutes: int = 10,
        model_latency_us: Distribution | None = None,
        overhead_latency_us: Distribution | None = None,
        invocations: float = 0,
        errors_5xx: float = 0,
        model_errors: float = 0,
        gpu_utilization: float | None = None,
        gpu_memory_utilization: float | None = None,
    ) -> None:
        """Per-minute datapoints for the last ``minutes`` minutes before ``now``, as SageMaker publishes them.

        ``gpu_*`` are SageMaker's raw values: summed over the instance's GPUs (up to 400 on four GPUs).
        """
        dims = [{"Name": "EndpointName", "Value": name}, {"Name": "VariantName", "Value": variant}]
        served: list[dict[str, Any]] = []
        instance: list[dict[str, Any]] = []
        for at in _minutes(now, minutes):
            for metric, distribution in (("ModelLatency", model_latency_us), ("OverheadLatency", overhead_latency_us)):
                if distribution:
                    served.append(_distribution(metric, dims, at, "Microseconds", distribution))
            # Without traffic SageMaker publishes no invocation metrics at all (not zeros).
            counters = (("Invocations", invocations), ("Invocation5XXErrors", errors_5xx),
                        ("InvocationModelErrors", model_errors)) if invocations else ()
            for metric, count in counters:
                served.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Unit": "None",
                               "Value": count})
            instance += _gpu(dims, at, gpu_utilization, gpu_memory_utilization)
        self._put(SAGEMAKER, served)
        self._put(ENDPOINT_INSTANCES, instance)

    def async_traffic(
        self,
        name: str,
        now: datetime,
        *,
        backlog: Sequence[float],
        oldest_age_s: Sequence[float],
        variant: str = "AllTraffic",
        processed: float = 0,
        failures: float = 0,
        model_latency_us: Distribution | None = None,
        time_in_backlog_us: Distribution | None = None,
        gpu_utilization: float | None = None,
        gpu_memory_utilization: float | None = None,
    ) -> None:
        """An asynchronous endpoint's minutes, oldest first (one per ``backlog`` value), as SageMaker publishes
        them: the queue with EndpointName alone (ApproximateBacklogSize: Count; ApproximateAgeOfOldestRequest:
        Seconds), InvocationsProcessed, InvocationFailures (Count) and TimeInBacklog, ModelLatency
        (Microseconds) with EndpointName and VariantName; never Invocations or OverheadLatency."""
        endpoint_dims = [{"Name": "EndpointName", "Value": name}]
        dims = [*endpoint_dims, {"Name": "VariantName", "Value": variant}]
        served: list[dict[str, Any]] = []
        instance: list[dict[str, Any]] = []
        minutes = len(backlog)
        for at, queued, age in zip(_minutes(now, minutes), backlog, oldest_age_s, strict=True):
            served += [
                {"MetricName": "ApproximateBacklogSize", "Dimensions": endpoint_dims, "Timestamp": at, "Unit": "Count",
                 "Value": float(queued)},
                {"MetricName": "ApproximateAgeOfOldestRequest", "Dimensions": endpoint_dims, "Timestamp": at,
                 "Unit": "Seconds", "Value": float(age)},
            ]
            if processed or failures:
                served += [{"MetricName": m, "Dimensions": dims, "Timestamp": at, "Unit": "Count", "Value": float(v)}
                           for m, v in (("InvocationsProcessed", processed), ("InvocationFailures", failures))]
            for metric, distribution in (("ModelLatency", model_latency_us), ("TimeInBacklog", time_in_backlog_us)):
                if distribution:
                    served.append(_distribution(metric, dims, at, "Microseconds", distribution))
            instance += _gpu(dims, at, gpu_utilization, gpu_memory_utilization)
        self._put(SAGEMAKER, served)
        self._put(ENDPOINT_INSTANCES, instance)

    def serverless_traffic(self, name: str, now: datetime, *, minutes: int = 10,
                           model_setup_us: Distribution | None = None, concurrency_utilization: float | None = None,
                           **invocations: Any) -> None:
        """A serverless endpoint's minutes: the invocation metrics (``invocations`` as for :meth:`traffic`, no GPU
        ones), ModelSetupTime (a sample per cold start, Microseconds) and ServerlessConcurrentExecutionsUtilization
        (executions / MaxConcurrency, 0-1, unit None)."""
        self.traffic(name, now, minutes=minutes, **invocations)
        dims = [{"Name": "EndpointName", "Value": name}, {"Name": "VariantName", "Value": "AllTraffic"}]
        data: list[dict[str, Any]] = []
        for at in _minutes(now, minutes):
            if model_setup_us:
                data.append(_distribution("ModelSetupTime", dims, at, "Microseconds", model_setup_us))
            if concurrency_utilization is not None:
                data.append({"MetricName": "ServerlessConcurrentExecutionsUtilization", "Dimensions": dims,
                             "Timestamp": at, "Unit": "None", "Value": concurrency_utilization})
        self._put(SAGEMAKER, data)

    def component_traffic(
        self,
        component: str,
        now: datetime,
        *,
        minutes: int = 10,
        invocations: float = 0,
        errors_5xx: float = 0,
        model_errors: float = 0,
        model_latency_us: Distribution | None = None,
        gpu_utilization_normalized: float | None = None,
        gpu_memory_utilization_normalized: float | None = None,
    ) -> None:
        """An inference component's minutes: invocation metrics in AWS/SageMaker and utilisation normalised to
        what each copy reserved (0-100 %, Percent) in /aws/sagemaker/InferenceComponents, both with the
        InferenceComponentName dimension alone."""
        dims = [{"Name": "InferenceComponentName", "Value": component}]
        served: list[dict[str, Any]] = []
        usage: list[dict[str, Any]] = []
        for at in _minutes(now, minutes):
            if invocations:
                served += [{"MetricName": m, "Dimensions": dims, "Timestamp": at, "Unit": "None", "Value": float(v)}
                           for m, v in (("Invocations", invocations), ("Invocation5XXErrors", errors_5xx),
                                        ("InvocationModelErrors", model_errors))]
            if model_latency_us:
                served.append(_distribution("ModelLatency", dims, at, "Microseconds", model_latency_us))
            usage += [{"MetricName": m, "Dimensions": dims, "Timestamp": at, "Unit": "Percent", "Value": v}
                      for m, v in (("GPUUtilizationNormalized", gpu_utilization_normalized),
                                   ("GPUMemoryUtilizationNormalized", gpu_memory_utilization_normalized))
                      if v is not None]
        self._put(SAGEMAKER, served)
        self._put(COMPONENTS, usage)

    def _put(self, namespace: str, data: list[dict[str, Any]], batch: int = 500) -> None:
        for start in range(0, len(data), batch):
            if self.metrics_backend is not None:
                moto_cloudwatch.put_metric_data(self.metrics_backend, namespace, data[start:start + batch])
            else:
                self.cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[start:start + batch])


def _minutes(now: datetime, minutes: int) -> list[datetime]:
    """The middle of each of the last ``minutes`` whole minutes before ``now``, oldest first."""
    end = now.replace(second=0, microsecond=0)
    return [end - timedelta(minutes=m) + timedelta(seconds=30) for m in range(minutes, 0, -1)]


def _distribution(metric: str, dims: list[dict[str, str]], at: datetime, unit: str,
                  distribution: Distribution) -> dict[str, Any]:
    return {"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Unit": unit,
            "Values": list(distribution), "Counts": [float(c) for c in distribution.values()]}


def _gpu(dims: list[dict[str, str]], at: datetime, util: float | None, memory: float | None) -> list[dict[str, Any]]:
    return [{"MetricName": m, "Dimensions": dims, "Timestamp": at, "Unit": "Percent", "Value": v}
            for m, v in (("GPUUtilization", util), ("GPUMemoryUtilization", memory)) if v is not None]


def samples(p90: float, p99: float, fast: float = 10_000.0) -> dict[float, int]:
    """100 samples a minute whose p90 is ``p90`` and p99 is ``p99`` (nearest rank); ``fast`` is the rest."""
    return {fast: 85, p90: 13, p99: 2}


def publish_node_metric(cloudwatch: Any, namespace: str, metric: str, instance_id: str, now: datetime,
                        values: Sequence[float] | Distribution, minutes: int = 10, unit: str = "None") -> None:
    """Per-minute datapoints of one fleet node's metric (dimension InstanceId): a value list or a distribution."""
    dims = [{"Name": "InstanceId", "Value": instance_id}]
    data = []
    for minute in range(1, minutes + 1):
        at = now.replace(second=0, microsecond=0) - timedelta(minutes=minute) + timedelta(seconds=30)
        if isinstance(values, Mapping):
            data.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Unit": unit,
                         "Values": list(values), "Counts": [float(c) for c in values.values()]})
        else:
            data.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Unit": unit,
                         "Values": [float(v) for v in values]})
    cloudwatch.put_metric_data(Namespace=namespace, MetricData=data)
