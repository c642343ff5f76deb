"""What an endpoint really is: its config (asynchronous, serverless, instance variants), the container image of
each model it serves, and the inference components it hosts.

SageMaker describes these in three APIs, each with no batched form:
- ``DescribeEndpointConfig`` (one per distinct config): ``AsyncInferenceConfig`` makes the endpoint asynchronous
  (docs.aws.amazon.com/sagemaker/latest/dg/async-inference.html); a variant's ``ServerlessConfig`` makes it
  serverless; an instance variant without a ``ModelName`` hosts inference components instead of one model
  (docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariant.html);
- ``ListInferenceComponents`` (``EndpointNameEquals``, paginated) and ``DescribeInferenceComponent`` (one per
  component: copies, accelerators per copy, container), asked only of endpoints that host components;
- ``DescribeModel`` (one per distinct model): the container image, which names the serving stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

IC_PAGE_SIZE = 100


@dataclass(frozen=True)
class VariantConfig:
    instance_type: str | None = None
    model_name: str | None = None
    serverless_max_concurrency: int | None = None
    provisioned_concurrency: int | None = None


@dataclass(frozen=True)
class EndpointConfig:
    variants: dict[str, VariantConfig]
    asynchronous: bool = False
    # AsyncInferenceConfig.ClientConfig.MaxConcurrentInvocationsPerInstance (None: SageMaker chooses)
    async_max_concurrency: int | None = None

    def hosts_components(self) -> bool:
        """Instance variants without a model: the endpoint serves inference components."""
        return any(v.instance_type and not v.model_name for v in self.variants.values())


@dataclass(frozen=True)
class InferenceComponent:
    """One model deployed onto an endpoint as copies; metrics carry the InferenceComponentName dimension."""

    name: str
    endpoint: str
    variant: str
    status: str
    model_name: str | None = None
    image: str | None = None
    current_copies: int = 0
    desired_copies: int = 0
    accelerators_per_copy: float | None = None  # ComputeResourceRequirements.NumberOfAcceleratorDevicesRequired
    failure_reason: str | None = None
    created: datetime | None = None
    last_modified: datetime | None = None

    @property
    def resource(self) -> str:
        """Also the Application Auto Scaling resource id of the component."""
        return f"inference-component/{self.name}"


def describe_config(sagemaker: Any, config_name: str) -> EndpointConfig:
    raw = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)
    variants = {}
    for v in raw.get("ProductionVariants", []):
        serverless = v.get("ServerlessConfig") or {}
        variants[v["VariantName"]] = VariantConfig(
            instance_type=v.get("InstanceType"),
            model_name=v.get("ModelName"),
            serverless_max_concurrency=serverless.get("MaxConcurrency"),
            provisioned_concurrency=serverless.get("ProvisionedConcurrency"),
        )
    async_config = raw.get("AsyncInferenceConfig")
    client = (async_config or {}).get("ClientConfig") or {}
    return EndpointConfig(variants, asynchronous=async_config is not None,
                          async_max_concurrency=client.get("MaxConcurrentInvocationsPerInstance"))


def model_image(sagemaker: Any, model_name: str) -> str | None:
    """The image of the model's (first) container; None for a model package without one."""
    raw = sagemaker.describe_model(ModelName=model_name)
    containers = [raw.get("PrimaryContainer") or {}, *raw.get("Containers", [])]
    return next((c["Image"] for c in containers if c.get("Image")), None)


def list_components(sagemaker: Any, endpoint_name: str) -> list[str]:
    names = []
    for page in sagemaker.get_paginator("list_inference_components").paginate(
        EndpointNameEquals=endpoint_name, PaginationConfig={"PageSize": IC_PAGE_SIZE}
    ):
        names += [s["InferenceComponentName"] for s in page.get("InferenceComponents", [])]
    return names


def describe_component(sagemaker: Any, name: str) -> InferenceComponent:
    raw = sagemaker.describe_inference_component(InferenceComponentName=name)
    spec = raw.get("Specification") or {}
    container = spec.get("Container") or {}
    deployed = container.get("DeployedImage") or {}
    runtime = raw.get("RuntimeConfig") or {}
    resources = spec.get("ComputeResourceRequirements") or {}
    return InferenceComponent(
        name=raw["InferenceComponentName"],
        endpoint=raw["EndpointName"],
        variant=raw.get("VariantName", ""),
        status=raw.get("InferenceComponentStatus", "unknown"),
        model_name=spec.get("ModelName"),
        image=deployed.get("SpecifiedImage") or deployed.get("ResolvedImage") or container.get("Image"),
        current_copies=int(runtime.get("CurrentCopyCount") or 0),
        desired_copies=int(runtime.get("DesiredCopyCount") or 0),
        accelerators_per_copy=resources.get("NumberOfAcceleratorDevicesRequired"),
        failure_reason=raw.get("FailureReason") or None,
        created=raw.get("CreationTime"),
        last_modified=raw.get("LastModifiedTime"),
    )
