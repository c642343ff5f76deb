"""Scaling limits: Application Auto Scaling targets of endpoint variants and inference components, Auto
Scaling groups of fleet nodes.

All are batched: DescribeScalableTargets takes 50 resource ids a call (and one scalable dimension, so
inference components, which scale ``sagemaker:inference-component:DesiredCopyCount``, are asked separately,
only when there are any), DescribeAutoScalingGroups 50 group names, so the call count grows with
ceil(targets / 50), never one call per target.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.inventory import chunked
from fmdoctor.inference.signals import serving_components, serving_variants

VARIANT_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
COMPONENT_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
RESOURCE_IDS_MAX = 50
GROUP_NAMES_MAX = 50
ASG_TAG = "aws:autoscaling:groupName"


@dataclass(frozen=True)
class ScalingLimit:
    resource: str  # endpoint/E/variant/V or the Auto Scaling group name
    min_capacity: int
    max_capacity: int
    desired: int | None = None  # Auto Scaling groups report it; variants report it on the endpoint


def scalable_targets(ctx: CheckContext) -> dict[str, ScalingLimit]:
    """The scalable targets of serving variants (endpoint/E/variant/V) and inference components
    (inference-component/C), by resource id."""
    return ctx.shared("inference.scalable_targets", lambda: _fetch_targets(ctx))


def _fetch_targets(ctx: CheckContext) -> dict[str, ScalingLimit]:
    variants = sorted({e.variant_resource(v) for e, v in serving_variants(ctx) if not v.serverless})
    components = sorted({c.resource for _, c in serving_components(ctx)})
    client = ctx.client("application-autoscaling")
    limits: dict[str, ScalingLimit] = {}
    for ids, dimension in ((variants, VARIANT_DIMENSION), (components, COMPONENT_DIMENSION)):
        for batch in chunked(ids, RESOURCE_IDS_MAX):
            for page in client.get_paginator("describe_scalable_targets").paginate(
                ServiceNamespace="sagemaker", ResourceIds=batch, ScalableDimension=dimension
            ):
                for raw in page.get("ScalableTargets", []):
                    limits[raw["ResourceId"]] = ScalingLimit(raw["ResourceId"], int(raw["MinCapacity"]),
                                                             int(raw["MaxCapacity"]))
    return limits


def fleet_groups(ctx: CheckContext) -> dict[str, ScalingLimit]:
    """The Auto Scaling groups (EC2 fleets, EKS managed node groups) the inference nodes belong to."""
    return ctx.shared("inference.fleet_groups", lambda: _fetch_groups(ctx))


def _fetch_groups(ctx: CheckContext) -> dict[str, ScalingLimit]:
    names = sorted({n.tags[ASG_TAG] for n in ctx.inventory.inference_nodes() if n.tags.get(ASG_TAG)})
    if not names:
        return {}
    client = ctx.client("autoscaling")
    groups: dict[str, ScalingLimit] = {}
    for batch in chunked(names, GROUP_NAMES_MAX):
        for page in client.get_paginator("describe_auto_scaling_groups").paginate(AutoScalingGroupNames=batch):
            for raw in page.get("AutoScalingGroups", []):
                name = raw["AutoScalingGroupName"]
                groups[name] = ScalingLimit(name, int(raw["MinSize"]), int(raw["MaxSize"]),
                                            int(raw.get("DesiredCapacity", 0)))
    return groups
