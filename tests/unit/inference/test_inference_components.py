"""Inference components: several models on one endpoint, judged one by one (latency, errors, GPUs, copies, scaling).

moto implements neither ListInferenceComponents/DescribeInferenceComponent nor Application Auto Scaling's
``sagemaker:inference-component:DesiredCopyCount`` dimension, so the SageMaker and Application Auto Scaling
clients are answered by botocore's Stubber, which checks every response against the services' own models
(real response shapes); CloudWatch, EC2 and tagging are moto, with the components' metrics published as
SageMaker documents them (InferenceComponentName dimension; tests/fixtures/inference).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from fmdoctor.demo.endpoint_builder import VLLM_IMAGE, samples
from fmdoctor.engine.api import new_aws
from fmdoctor.engine.model import Severity
from fmdoctor.engine.registry import default_registry
from fmdoctor.runbooks import get_runbook

INFERENCE_IDS = [c.id for c in default_registry().select(["inference"])]
ARN = "arn:aws:sagemaker:us-west-2:123456789012:"
ENDPOINT = "llm-hub"
TGI_IMAGE = ("763104351884.dkr.ecr.us-west-2.amazonaws.com/huggingface-pytorch-tgi-inference:"
             "2.4.0-tgi2.3.1-gpu-py311-cu124-ubuntu22.04")
CHAT = "llama-8b-chat"  # healthy: vLLM, GPU memory 92 %
SQL = "mistral-7b-sql"  # slow, failing, saturated, at its copy maximum, short of copies
EMBED = "bge-embedder"  # idle


def component(name: str, at: datetime, *, accelerators: float, current: int, desired: int, image: str | None = None,
              model: str | None = None, status: str = "InService") -> dict[str, Any]:
    """A DescribeInferenceComponent response: image-based (Container) or model-based (ModelName)."""
    spec: dict[str, Any] = {"ComputeResourceRequirements": {"NumberOfAcceleratorDevicesRequired": accelerators,
                                                            "MinMemoryRequiredInMb": 16384}}
    if image:
        spec["Container"] = {"DeployedImage": {"SpecifiedImage": image, "ResolvedImage": image + "@sha256:" + "0" * 64,
                                               "ResolutionTime": at - timedelta(hours=2)}}
    if model:
        spec["ModelName"] = model
    return {
        "InferenceComponentName": name, "InferenceComponentArn": f"{ARN}inference-component/{name}",
        "EndpointName": ENDPOINT, "EndpointArn": f"{ARN}endpoint/{ENDPOINT}", "VariantName": "AllTraffic",
        "Specification": spec, "RuntimeConfig": {"DesiredCopyCount": desired, "CurrentCopyCount": current},
        "CreationTime": at - timedelta(hours=2), "LastModifiedTime": at - timedelta(hours=2),
        "InferenceComponentStatus": status,
    }


def hub_responses(at: datetime, components: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """What SageMaker answers, in call order, for an endpoint of two ml.g5.12xlarge hosting ``components``."""
    created = at - timedelta(days=1)
    models = [c["Specification"]["ModelName"] for c in components if "Container" not in c["Specification"]]
    return [
        ("describe_endpoint", {
            "EndpointName": ENDPOINT, "EndpointArn": f"{ARN}endpoint/{ENDPOINT}", "EndpointConfigName": "llm-hub-v1",
            "EndpointStatus": "InService", "CreationTime": created, "LastModifiedTime": created,
            "ProductionVariants": [{"VariantName": "AllTraffic", "CurrentWeight": 1.0, "DesiredWeight": 1.0,
                                    "CurrentInstanceCount": 2, "DesiredInstanceCount": 2,
                                    "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}}],
        }),
        ("describe_endpoint_config", {
            "EndpointConfigName": "llm-hub-v1", "EndpointConfigArn": f"{ARN}endpoint-config/llm-hub-v1",
            "CreationTime": created, "ExecutionRoleArn": "arn:aws:iam::123456789012:role/sagemaker",
            "ProductionVariants": [{"VariantName": "AllTraffic", "InstanceType": "ml.g5.12xlarge",
                                    "InitialInstanceCount": 2,
                                    "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}}],
        }),
        ("list_inference_components", {"InferenceComponents": [{
            "InferenceComponentName": c["InferenceComponentName"], "InferenceComponentArn": c["InferenceComponentArn"],
            "EndpointName": ENDPOINT, "EndpointArn": c["EndpointArn"], "VariantName": "AllTraffic",
            "InferenceComponentStatus": c["InferenceComponentStatus"], "CreationTime": c["CreationTime"],
            "LastModifiedTime": c["LastModifiedTime"]} for c in components]}),
        *[("describe_inference_component", c) for c in components],
        *[("describe_model", {"ModelName": m, "ModelArn": f"{ARN}model/{m}", "CreationTime": created,
                              "PrimaryContainer": {"Image": TGI_IMAGE}}) for m in models],
    ]


@pytest.fixture
def stubbed(aws) -> Callable[..., Any]:
    """An aws_factory whose SageMaker (and Application Auto Scaling) clients answer from Stubber queues; a call
    with no queued answer fails the run, and every queued answer must be used."""
    stubbers: list[Stubber] = []

    def factory_for(sagemaker: list[tuple[str, dict[str, Any]]], scaling: list[dict[str, Any]] | None = None):
        def factory(options: Any, credentials: Any = None) -> Any:
            session = new_aws(options, credentials)
            for service, responses in (("sagemaker", sagemaker), ("application-autoscaling", scaling)):
                if responses is None:
                    continue
                stubber = Stubber(session.client(service))
                for item in responses:
                    operation, response = item if service == "sagemaker" else ("describe_scalable_targets", item)
                    stubber.add_response(operation, response)  # parallel describes: order of calls may vary
                stubber.activate()
                stubbers.append(stubber)
            return session
        return factory

    yield factory_for
    for stubber in stubbers:
        stubber.assert_no_pending_responses()


def scalable(name: str, max_capacity: int) -> dict[str, Any]:
    return {"ServiceNamespace": "sagemaker", "ResourceId": f"inference-component/{name}",
            "ScalableDimension": "sagemaker:inference-component:DesiredCopyCount", "MinCapacity": 1,
            "MaxCapacity": max_capacity, "RoleARN": "arn:aws:iam::123456789012:role/aws-service-role",
            "CreationTime": datetime(2026, 1, 1)}


def run(infer, factory, only=INFERENCE_IDS):
    return infer(only, cluster=None, overrides={"inference": {"endpoints": [ENDPOINT]}}, aws_factory=factory)


def test_healthy_vllm_component_at_92_percent_memory_has_no_finding(endpoints, infer, at, stubbed):
    chat = component(CHAT, at, accelerators=2, current=2, desired=2, image=VLLM_IMAGE)
    endpoints.component_traffic(CHAT, at, invocations=400, model_latency_us=samples(180_000, 450_000),
                                gpu_utilization_normalized=55, gpu_memory_utilization_normalized=92)
    report = run(infer, stubbed(hub_responses(at, [chat]), [{"ScalableTargets": []}, {"ScalableTargets": [
        scalable(CHAT, 4)]}]))
    assert report.findings == [] and report.errors == []
    # The stubbers' queues end empty (checked on teardown), and a DescribeModel no queue holds would have
    # failed the run: one listing, one describe, no DescribeModel (the component names its image itself).


def test_each_component_trips_only_its_own_checks(endpoints, infer, at, stubbed):
    components = [
        component(CHAT, at, accelerators=2, current=2, desired=2, image=VLLM_IMAGE),
        component(SQL, at, accelerators=1, current=1, desired=3, model="mistral-7b-sql-model"),
        component(EMBED, at, accelerators=1, current=1, desired=1, image=VLLM_IMAGE),
    ]
    endpoints.component_traffic(CHAT, at, invocations=400, model_latency_us=samples(180_000, 450_000),
                                gpu_utilization_normalized=55, gpu_memory_utilization_normalized=92)
    endpoints.component_traffic(SQL, at, invocations=100, errors_5xx=5, model_latency_us=samples(1_600_000, 2_400_000),
                                gpu_utilization_normalized=97, gpu_memory_utilization_normalized=94)
    endpoints.component_traffic(EMBED, at, gpu_utilization_normalized=0, gpu_memory_utilization_normalized=40)
    targets = [{"ScalableTargets": []}, {"ScalableTargets": [scalable(CHAT, 4), scalable(SQL, 1)]}]
    report = run(infer, stubbed(hub_responses(at, components), targets))
    assert report.errors == []
    found = sorted((f.check, f.resource) for f in report.findings)
    sql, embed = f"inference-component/{SQL}", f"inference-component/{EMBED}"
    assert found == sorted([
        ("endpoint-unhealthy", sql), ("inference-latency-slo", sql), ("inference-errors", sql),
        ("accelerator-saturation", sql), ("autoscaling-at-max", sql), ("inference-idle", embed),
    ])
    by_check = {f.check: f for f in report.findings}
    short = by_check["endpoint-unhealthy"]
    assert short.severity is Severity.WARNING and (short.evidence["current_copies"], short.evidence["desired_copies"]) \
        == (1, 3)
    assert by_check["inference-latency-slo"].evidence["model_latency_p90_ms"] == 1600.0
    assert by_check["inference-errors"].evidence["error_rate_percent"] == 5.0
    saturated = by_check["accelerator-saturation"].evidence
    assert saturated["utilization_percent"] == 97.0 and saturated["accelerators_per_instance"] == 1
    assert (saturated["serving_stack"], saturated["high_memory_expected"]) == ("TGI", True)  # via DescribeModel
    assert saturated["image"] == TGI_IMAGE and "KV cache" in saturated["memory_note"]
    at_max = by_check["autoscaling-at-max"].evidence
    assert at_max["scalable_dimension"] == "sagemaker:inference-component:DesiredCopyCount"
    assert by_check["inference-idle"].evidence["copies"] == 1
    for finding in report.findings:  # every component finding renders its runbook, with nothing left blank
        text = get_runbook(finding.runbook).render(finding, cluster="serving", region="us-west-2")
        assert finding.evidence["inference_component"] in text and "None" not in text, (finding.check, text)


def test_failed_component_is_critical(infer, at, stubbed):
    broken = component(SQL, at, accelerators=1, current=0, desired=1, image=VLLM_IMAGE, status="Failed")
    broken["FailureReason"] = "The container for inference component mistral-7b-sql did not pass the ping health check."
    report = run(infer, stubbed(hub_responses(at, [broken])), only=["endpoint-unhealthy"])
    [finding] = report.findings
    assert finding.severity is Severity.CRITICAL and finding.resource == f"inference-component/{SQL}"
    assert "ping health check" in finding.summary
    assert "did not pass the ping health check" in get_runbook(finding.runbook).render(finding, cluster="serving",
                                                                                       region="us-west-2")


def test_denied_component_listing_is_unverified(infer, at, aws):
    def factory(options: Any, credentials: Any = None) -> Any:
        session = new_aws(options, credentials)
        stubber = Stubber(session.client("sagemaker"))
        for operation, response in hub_responses(at, [])[:2]:
            stubber.add_response(operation, response)
        stubber.add_client_error("list_inference_components", "AccessDeniedException", http_status_code=400,
                                 service_message="User: arn:aws:iam::123456789012:user/ci is not authorized to "
                                                 "perform: sagemaker:ListInferenceComponents")
        stubber.activate()
        return session

    report = run(infer, factory, only=["inference-errors"])
    [error] = report.errors
    assert error.unverified == f"inference components of SageMaker endpoint {ENDPOINT}"
    assert (error.code, error.iam_action) == ("AccessDeniedException", "sagemaker:ListInferenceComponents")
