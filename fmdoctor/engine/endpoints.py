"""SageMaker real-time endpoints of a target: those tagged with the cluster, plus those named in the config.

Discovery is batched where the APIs allow it: one Resource Groups Tagging ``GetResources`` per tag key
(tag filters AND across keys, so OR needs one query per key; each returns only matching endpoints, so
the count does not grow with the account's other endpoints), one paginated ``ListEndpoints`` (exact-case
names: SageMaker may lower-case names in ARNs, and CloudWatch dimensions need the exact name), then one
``DescribeEndpoint`` per endpoint and one ``DescribeEndpointConfig`` per distinct config, in parallel:
SageMaker has no batched describe. Failures never sink the run: what could not be discovered becomes a
:class:`DiscoveryGap`, which the inference checks report as unverified.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from fmdoctor.engine.errors import AwsFailure, TargetNotFound, describe_aws_failure

if TYPE_CHECKING:
    from fmdoctor.engine.aws import Aws
    from fmdoctor.engine.inventory import Inventory

ENDPOINT_RESOURCE_TYPE = "sagemaker:endpoint"
TAG_PAGE_SIZE = 100
LIST_PAGE_SIZE = 100
DESCRIBE_WORKERS = 8
T = TypeVar("T")


@dataclass(frozen=True)
class EndpointVariant:
    name: str
    instance_type: str | None = None  # from the endpoint config; None when serverless or unknown
    current_instances: int = 0
    desired_instances: int = 0
    serverless: bool = False


@dataclass(frozen=True)
class Endpoint:
    name: str
    arn: str
    status: str
    config_name: str = ""
    failure_reason: str | None = None
    created: datetime | None = None
    last_modified: datetime | None = None
    variants: tuple[EndpointVariant, ...] = ()
    selected_by: str = "tag"  # "tag" (cluster tag keys) or "name" (--endpoint / inference.endpoints)

    @property
    def resource(self) -> str:
        return f"endpoint/{self.name}"

    def variant_resource(self, variant: EndpointVariant) -> str:
        """Also the Application Auto Scaling resource id of the variant."""
        return f"endpoint/{self.name}/variant/{variant.name}"


@dataclass(frozen=True)
class DiscoveryGap:
    """Part of the target that could not be discovered, and why."""

    unverified: str
    failure: AwsFailure
    error: BaseException = field(compare=False, repr=False)


def endpoint_target_name(names: Sequence[str]) -> str:
    """The report's name for a target that is only endpoints (``fmdoctor check --endpoint NAME``)."""
    return "endpoint/" + ",".join(names)


def with_endpoints(aws: Aws, inventory: Inventory, tag_keys: Sequence[str], names: Sequence[str]) -> Inventory:
    """The inventory plus its endpoints; re-raises a discovery failure when nothing else was found."""
    endpoints, gaps = fetch_endpoints(aws, inventory.cluster, tag_keys, names)
    if gaps and not endpoints and inventory.is_empty():  # a HyperPod cluster found is something
        raise gaps[0].error  # the target may exist: report that it could not be read, not "unknown cluster"
    return dataclasses.replace(inventory, endpoints=endpoints, endpoint_gaps=gaps)


def fetch_endpoints(
    aws: Aws, cluster: str, tag_keys: Sequence[str], names: Sequence[str] = ()
) -> tuple[tuple[Endpoint, ...], tuple[DiscoveryGap, ...]]:
    gaps: list[DiscoveryGap] = []
    with ThreadPoolExecutor(max_workers=DESCRIBE_WORKERS, thread_name_prefix="fmdoctor-endpoints") as pool:
        tagging = aws.client("resourcegroupstaggingapi")
        tagged_arns: set[str] = set()
        for key, result in zip(tag_keys, pool.map(lambda k: _attempt(lambda: _tagged_arns(tagging, k, cluster)),
                                                   tag_keys), strict=True):
            if isinstance(result, DiscoveryGap):
                gaps.append(_reword(result, f"SageMaker endpoints tagged {key}={cluster}"))
            else:
                tagged_arns |= result
        sagemaker = aws.client("sagemaker")
        wanted: dict[str, str] = {n: "name" for n in names}
        if tagged_arns:
            listing = _attempt(lambda: _exact_names(sagemaker))
            for arn in sorted(tagged_arns):
                fallback = arn.rsplit("/", 1)[-1]
                exact = listing.get(arn.lower(), None) if isinstance(listing, dict) else fallback
                if exact is not None:  # None: tagged but gone (the tagging index lags deletions)
                    wanted.setdefault(exact, "tag")
        described = list(pool.map(lambda n: (n, _attempt(lambda: _describe(sagemaker, n))), wanted))
        raws: list[tuple[dict[str, Any], str]] = []
        for name, result in described:
            if isinstance(result, DiscoveryGap):
                if result.failure.kind == "bad-input" and "could not find" in result.failure.message.lower():
                    if wanted[name] == "name":
                        raise TargetNotFound(
                            f"SageMaker endpoint {name!r} does not exist in {aws.region}",
                            hint="check the name, --region, and inference.endpoints in the config",
                        )
                    continue  # deleted between the tag lookup and the describe
                gaps.append(_reword(result, f"status and variants of SageMaker endpoint {name}"))
            else:
                raws.append((result, wanted[name]))
        config_names = sorted({raw.get("EndpointConfigName", "") for raw, _ in raws} - {""})
        configs: dict[str, dict[str, str]] = {}
        for config_name, result in zip(
            config_names, pool.map(lambda c: _attempt(lambda: _variant_types(sagemaker, c)), config_names), strict=True
        ):
            if isinstance(result, DiscoveryGap):
                gaps.append(_reword(result, f"instance types of endpoint config {config_name}"))
            else:
                configs[config_name] = result
    endpoints = [_endpoint(raw, configs.get(raw.get("EndpointConfigName", ""), {}), how) for raw, how in raws]
    endpoints.sort(key=lambda e: e.name)
    return tuple(endpoints), tuple(gaps)


def _attempt(call: Callable[[], T]) -> T | DiscoveryGap:
    try:
        return call()
    except Exception as exc:
        failure = describe_aws_failure(exc)  # in the worker thread, where the failed call is known
        if failure is None:
            raise
        return DiscoveryGap("", failure, exc)


def _reword(gap: DiscoveryGap, unverified: str) -> DiscoveryGap:
    return dataclasses.replace(gap, unverified=unverified)


def _tagged_arns(tagging: Any, key: str, cluster: str) -> set[str]:
    arns: set[str] = set()
    for page in tagging.get_paginator("get_resources").paginate(
        ResourceTypeFilters=[ENDPOINT_RESOURCE_TYPE],
        TagFilters=[{"Key": key, "Values": [cluster]}],
        ResourcesPerPage=TAG_PAGE_SIZE,
    ):
        arns.update(m["ResourceARN"] for m in page.get("ResourceTagMappingList", []))
    return arns


def _exact_names(sagemaker: Any) -> dict[str, str]:
    names: dict[str, str] = {}
    for page in sagemaker.get_paginator("list_endpoints").paginate(PaginationConfig={"PageSize": LIST_PAGE_SIZE}):
        for summary in page.get("Endpoints", []):
            names[summary["EndpointArn"].lower()] = summary["EndpointName"]
    return names


def _describe(sagemaker: Any, name: str) -> dict[str, Any]:
    return sagemaker.describe_endpoint(EndpointName=name)  # type: ignore[no-any-return]


def _variant_types(sagemaker: Any, config_name: str) -> dict[str, str]:
    config = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)
    return {v["VariantName"]: v["InstanceType"] for v in config.get("ProductionVariants", []) if v.get("InstanceType")}


def _endpoint(raw: dict[str, Any], types: dict[str, str], selected_by: str) -> Endpoint:
    variants = tuple(
        EndpointVariant(
            name=v["VariantName"],
            instance_type=types.get(v["VariantName"]),
            current_instances=int(v.get("CurrentInstanceCount") or 0),
            desired_instances=int(v.get("DesiredInstanceCount") or 0),
            serverless=bool(v.get("CurrentServerlessConfig") or v.get("DesiredServerlessConfig")),
        )
        for v in raw.get("ProductionVariants", [])
    )
    return Endpoint(
        name=raw["EndpointName"],
        arn=raw["EndpointArn"],
        status=raw.get("EndpointStatus", "unknown"),
        config_name=raw.get("EndpointConfigName", ""),
        failure_reason=raw.get("FailureReason") or None,
        created=raw.get("CreationTime"),
        last_modified=raw.get("LastModifiedTime"),
        variants=variants,
        selected_by=selected_by,
    )
