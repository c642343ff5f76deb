"""Scenario builder for inference: SageMaker endpoints, their auto scaling and the metrics SageMaker publishes.

Plain boto3 calls that would work against real AWS (moto only lacks CloudWatch percentiles, which
``moto_compat`` adds). Latencies are published as distributions (``Values`` + ``Counts``, in
microseconds like SageMaker's own ModelLatency), so p90/p99 are computed from raw samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import boto3

ROLE_ARN = "arn:aws:iam::123456789012:role/fmdoctor-demo-sagemaker"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/huggingface-pytorch-tgi-inference:2.1-tgi1.4-gpu"
SAGEMAKER = "AWS/SageMaker"
ENDPOINT_INSTANCES = "/aws/sagemaker/Endpoints"
VARIANT_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
Distribution = Mapping[float, int]  # value -> how many samples per minute


@dataclass
class EndpointBuilder:
    session: boto3.Session
    cluster: str | None = None  # tag the endpoints with it (None: untagged, selected by name only)
    tag_key: str = "fmdoctor:cluster"

    def __post_init__(self) -> None:
        self.sagemaker = self.session.client("sagemaker")
        self.cloudwatch = self.session.client("cloudwatch")
        self.autoscaling = self.session.client("application-autoscaling")

    def endpoint(self, name: str, instance_type: str, instances: int = 1,
                 variants: Sequence[str] = ("AllTraffic",), tags: Mapping[str, str] | None = None) -> str:
        """A model, an endpoint config with one variant per name, and the endpoint; returns its ARN."""
        self.sagemaker.create_model(ModelName=f"{name}-model", ExecutionRoleArn=ROLE_ARN,
                                    PrimaryContainer={"Image": IMAGE})
        self.sagemaker.create_endpoint_config(
            EndpointConfigName=f"{name}-config",
            ProductionVariants=[
                {"VariantName": v, "ModelName": f"{name}-model", "InstanceType": instance_type,
                 "InitialInstanceCount": instances, "InitialVariantWeight": 1.0}
                for v in variants
            ],
        )
        all_tags = {**({self.tag_key: self.cluster} if self.cluster else {}), **(tags or {})}
        return self.sagemaker.create_endpoint(  # type: ignore[no-any-return]
            EndpointName=name, EndpointConfigName=f"{name}-config",
            Tags=[{"Key": k, "Value": v} for k, v in all_tags.items()],
        )["EndpointArn"]

    def autoscale(self, name: str, min_capacity: int, max_capacity: int, variant: str = "AllTraffic",
                  invocations_per_instance: float = 70.0) -> None:
        """A scalable target and the usual target-tracking policy on invocations per instance."""
        resource = f"endpoint/{name}/variant/{variant}"
        self.autoscaling.register_scalable_target(
            ServiceNamespace="sagemaker", ResourceId=resource, ScalableDimension=VARIANT_DIMENSION,
            MinCapacity=min_capacity, MaxCapacity=max_capacity,
        )
        self.autoscaling.put_scaling_policy(
            PolicyName=f"{name}-invocations", ServiceNamespace="sagemaker", ResourceId=resource,
            ScalableDimension=VARIANT_DIMENSION, PolicyType="TargetTrackingScaling",
            TargetTrackingScalingPolicyConfiguration={
                "TargetValue": invocations_per_instance,
                "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            },
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
        for minute in range(1, minutes + 1):
            at = now.replace(second=0, microsecond=0) - timedelta(minutes=minute) + timedelta(seconds=30)
            for metric, distribution in (("ModelLatency", model_latency_us), ("OverheadLatency", overhead_latency_us)):
                if distribution:
                    served.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Unit": "Microseconds",
                                   "Values": list(distribution), "Counts": [float(c) for c in distribution.values()]})
            # Without traffic SageMaker publishes no invocation metrics at all (not zeros).
            counters = (("Invocations", invocations), ("Invocation5XXErrors", errors_5xx),
                        ("InvocationModelErrors", model_errors)) if invocations else ()
            for metric, count in counters:
                served.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Unit": "None",
                               "Value": count})
            gpu = (("GPUUtilization", gpu_utilization), ("GPUMemoryUtilization", gpu_memory_utilization))
            for metric, value in gpu:
                if value is not None:
                    instance.append({"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Unit": "Percent",
                                     "Value": value})
        self._put(SAGEMAKER, served)
        self._put(ENDPOINT_INSTANCES, instance)

    def _put(self, namespace: str, data: list[dict[str, Any]], batch: int = 500) -> None:
        for start in range(0, len(data), batch):
            self.cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[start:start + batch])


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
