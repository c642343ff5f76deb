"""SageMaker endpoints of a target: those tagged with the cluster, plus those named in the config.

Discovery is batched where the APIs allow it: one Resource Groups Tagging ``GetResources`` per tag key
(tag filters AND across keys, so OR needs one query per key; each returns only matching endpoints, so
the count does not grow with the account's other endpoints), one paginated ``ListEndpoints`` (exact-case
names: SageMaker may lower-case names in ARNs, and CloudWatch dimensions need the exact name), then one
``DescribeEndpoint`` per endpoint, one ``DescribeEndpointConfig`` per distinct config, the inference
components of the endpoints that host them and one ``DescribeModel`` per distinct model
(:mod:`fmdoctor.engine.endpoint_details`), each stage in parallel: SageMaker has no batched describe.
Failures never sink the run: what could not be discovered becomes a :class:`DiscoveryGap`, which the
inference checks report as unverified; a model whose image could not be read only leaves its serving stack
unknown (the image is evidence, not a judgement).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from fmdoctor.engine.endpoint_details import (
    EndpointConfig,
    InferenceComponent,
    describe_component,
    describe_config,
    list_components,
    model_image,
)
from fmdoctor.engine.errors import AwsFailure, TargetNotFound, describe_aws_failure, note_failed_call

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
    serverless_max_concurrency: int | None = None
    provisioned_concurrency: int | None = None
    model_name: str | None = None  # None on an endpoint that hosts inference components
    image: str | None = None  # the model's container image (DescribeModel)
    image_unread: str | None = None  # why the image is unknown, when DescribeModel failed


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
    asynchronous: bool = False  # the config has an AsyncInferenceConfig
    async_max_concurrency: int | None = None  # per instance, from AsyncInferenceConfig.ClientConfig
    hosts_components: bool = False  # instance variants without a model: it serves inference components
    components: tuple[InferenceComponent, ...] = ()

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


def with_endpoints(inventory: Inventory, endpoints: tuple[Endpoint, ...], gaps: tuple[DiscoveryGap, ...]) -> Inventory:
    """The inventory plus its endpoints (:func:`fetch_endpoints`); re-raises a discovery failure when nothing else
    was found."""
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
        for name, endpoint_or_gap in described:
            if isinstance(endpoint_or_gap, DiscoveryGap):
                if endpoint_or_gap.failure.kind == "bad-input" and \
                        "could not find" in endpoint_or_gap.failure.message.lower():
                    if wanted[name] == "name":
                        raise TargetNotFound(
                            f"SageMaker endpoint {name!r} does not exist in {aws.region}",
                            hint="check the name, --region, and inference.endpoints in the config",
                        )
                    continue  # deleted between the tag lookup and the describe
                gaps.append(_reword(endpoint_or_gap, f"status and variants of SageMaker endpoint {name}"))
            else:
                raws.append((endpoint_or_gap, wanted[name]))
        config_names = sorted({raw.get("EndpointConfigName", "") for raw, _ in raws} - {""})
        configs: dict[str, EndpointConfig] = {}
        for config_name, config_or_gap in zip(
            config_names, pool.map(lambda c: _attempt(lambda: describe_config(sagemaker, c)), config_names), strict=True
        ):
            if isinstance(config_or_gap, DiscoveryGap):
                gaps.append(_reword(config_or_gap, f"instance types of endpoint config {config_name}"))
            else:
                configs[config_name] = config_or_gap
        hosting = sorted(raw["EndpointName"] for raw, _ in raws
                         if (c := configs.get(raw.get("EndpointConfigName", ""))) and c.hosts_components())
        components = _components(pool, sagemaker, hosting, gaps)
        model_names = {v.model_name for c in configs.values() for v in c.variants.values() if v.model_name}
        model_names |= {ic.model_name for ics in components.values() for ic in ics if ic.model_name and not ic.image}
        images = dict(zip(sorted(model_names), pool.map(lambda m: _attempt(lambda: model_image(sagemaker, m)),
                                                        sorted(model_names)), strict=True))
    endpoints = [_endpoint(raw, configs.get(raw.get("EndpointConfigName", "")), components.get(raw["EndpointName"], ()),
                           images, how) for raw, how in raws]
    endpoints.sort(key=lambda e: e.name)
    return tuple(endpoints), tuple(gaps)


def _components(pool: ThreadPoolExecutor, sagemaker: Any, endpoint_names: list[str], gaps: list[DiscoveryGap]
                ) -> dict[str, tuple[InferenceComponent, ...]]:
    """The inference components of each endpoint that hosts them (a listing, then one describe each)."""
    listed = list(pool.map(lambda e: _attempt(lambda: list_components(sagemaker, e)), endpoint_names))
    found: dict[str, tuple[InferenceComponent, ...]] = {}
    for endpoint, names in zip(endpoint_names, listed, strict=True):
        if isinstance(names, DiscoveryGap):
            gaps.append(_reword(names, f"inference components of SageMaker endpoint {endpoint}"))
            continue
        described = list(pool.map(lambda n: _attempt(lambda: describe_component(sagemaker, n)), names))
        for name, result in zip(names, described, strict=True):
            if isinstance(result, DiscoveryGap):
                gaps.append(_reword(result, f"copies and model of inference component {name}"))
        found[endpoint] = tuple(r for r in described if isinstance(r, InferenceComponent))
    return found


def _attempt(call: Callable[[], T]) -> T | DiscoveryGap:
    try:
        return call()
    except Exception as exc:
        failure = describe_aws_failure(exc)  # in the worker thread, where the failed call is known
        if failure is None:
            raise
        note_failed_call(exc)  # and named on the error, which may be re-raised in another thread
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


def _endpoint(raw: dict[str, Any], config: EndpointConfig | None, components: tuple[InferenceComponent, ...],
              images: dict[str, str | None | DiscoveryGap], selected_by: str) -> Endpoint:
    known = config.variants if config else {}
    variants = []
    for v in raw.get("ProductionVariants", []):
        conf = known.get(v["VariantName"])
        serverless = v.get("CurrentServerlessConfig") or v.get("DesiredServerlessConfig") or {}
        model = conf.model_name if conf else None
        image = images.get(model or "")
        variants.append(EndpointVariant(
            name=v["VariantName"],
            instance_type=conf.instance_type if conf else None,
            current_instances=int(v.get("CurrentInstanceCount") or 0),
            desired_instances=int(v.get("DesiredInstanceCount") or 0),
            serverless=bool(serverless) or bool(conf and conf.serverless_max_concurrency),
            serverless_max_concurrency=(serverless.get("MaxConcurrency")
                                        or (conf.serverless_max_concurrency if conf else None)),
            provisioned_concurrency=(serverless.get("ProvisionedConcurrency")
                                     or (conf.provisioned_concurrency if conf else None)),
            model_name=model,
            image=image if isinstance(image, str) else None,
            image_unread=_unread(image),
        ))
    return Endpoint(
        name=raw["EndpointName"],
        arn=raw["EndpointArn"],
        status=raw.get("EndpointStatus", "unknown"),
        config_name=raw.get("EndpointConfigName", ""),
        failure_reason=raw.get("FailureReason") or None,
        created=raw.get("CreationTime"),
        last_modified=raw.get("LastModifiedTime"),
        variants=tuple(variants),
        selected_by=selected_by,
        asynchronous=bool(config and config.asynchronous),
        async_max_concurrency=config.async_max_concurrency if config else None,
        hosts_components=bool(config and config.hosts_components()),
        components=tuple(_with_image(ic, images) for ic in components),
    )


def _with_image(component: InferenceComponent, images: dict[str, str | None | DiscoveryGap]) -> InferenceComponent:
    found = images.get(component.model_name or "")
    if component.image or not isinstance(found, str):
        return component
    return dataclasses.replace(component, image=found)


def _unread(image: str | None | DiscoveryGap) -> str | None:
    if not isinstance(image, DiscoveryGap):
        return None
    failure = image.failure
    return f"{failure.code}: " + (f"{failure.iam_action} needed" if failure.iam_action else failure.message)
