"""Serving stacks recognised from container images, and LLM servers' reserved GPU memory never read as saturation.

The image URIs are the forms AWS's Deep Learning Containers and the projects publish (account 763104351884 is
the DLC registry; nvcr.io NVIDIA's; ghcr.io Hugging Face's; Docker Hub vLLM's).
"""

from __future__ import annotations

import pytest

from fmdoctor.demo.endpoint_builder import PYTORCH_IMAGE, VLLM_IMAGE, samples
from fmdoctor.inference.stacks import serving_stack, stack_evidence

DLC = "763104351884.dkr.ecr.us-west-2.amazonaws.com/"


@pytest.mark.parametrize("image, stack", [
    (VLLM_IMAGE, "vLLM"),
    ("vllm/vllm-openai:v0.6.3", "vLLM"),
    (DLC + "huggingface-pytorch-tgi-inference:2.1-tgi1.4-gpu", "TGI"),
    ("ghcr.io/huggingface/text-generation-inference:2.4.0", "TGI"),
    (DLC + "djl-inference:0.29.0-lmi11.0.0-cu124", "DJL LMI"),
    (DLC + "djl-inference:0.29.0-tensorrtllm0.11.0-cu124", "TensorRT-LLM"),
    ("nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3", "TensorRT-LLM"),
    (DLC + "djl-inference:0.29.0-neuronx-sdk2.19.1", "NeuronX"),
    (DLC + "huggingface-pytorch-tgi-inference:2.1.2-optimum0.0.25-neuronx-py310-ubuntu22.04", "NeuronX"),
    ("785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.05-py3", "Triton"),
    (PYTORCH_IMAGE, None),
    (None, None),
])
def test_stack_from_image(image, stack):
    found = serving_stack(image)
    assert (found.name if found else None) == stack


def test_plain_triton_is_not_assumed_to_reserve_memory():
    """Only Triton's TensorRT-LLM backend reserves a KV cache; the image does not say which backend runs."""
    evidence = stack_evidence("785573368785.dkr.ecr.us-east-1.amazonaws.com/sagemaker-tritonserver:24.05-py3")
    assert evidence["serving_stack"] == "Triton" and evidence["high_memory_expected"] is False


def test_healthy_vllm_endpoint_at_92_percent_memory_has_no_finding(endpoints, infer, at):
    """vLLM reserves ~0.9 of every GPU at start-up: 92 % memory with 60 % compute is a healthy LLM server."""
    endpoints.endpoint("chat", "ml.g4dn.12xlarge", instances=2, image=VLLM_IMAGE)
    endpoints.autoscale("chat", min_capacity=1, max_capacity=2)  # at its maximum, and calm
    endpoints.traffic("chat", at, model_latency_us=samples(220_000, 600_000), overhead_latency_us={5_000: 100},
                      invocations=200, gpu_utilization=240.0, gpu_memory_utilization=368.0)
    report = infer(["accelerator-saturation", "autoscaling-at-max", "inference-latency-slo", "inference-idle"])
    assert report.findings == [] and report.errors == []


def test_gpu_memory_alone_is_never_saturation(endpoints, infer, at):
    """Even without a recognised LLM server: memory full and compute calm is not a reason to add instances."""
    endpoints.endpoint("classifier", "ml.g4dn.12xlarge", image=PYTORCH_IMAGE)
    endpoints.traffic("classifier", at, invocations=100, gpu_utilization=120, gpu_memory_utilization=384)
    assert infer(["accelerator-saturation"]).findings == []


def test_saturated_llm_endpoint_says_high_memory_is_expected(endpoints, infer, at):
    endpoints.endpoint("chat", "ml.g4dn.12xlarge", image=VLLM_IMAGE)
    endpoints.traffic("chat", at, invocations=100, gpu_utilization=380, gpu_memory_utilization=372)
    [finding] = infer(["accelerator-saturation"]).findings
    ev = finding.evidence
    assert (ev["utilization_percent"], ev["memory_utilization_percent"]) == (95.0, 93.0)
    assert (ev["serving_stack"], ev["high_memory_expected"], ev["image"]) == ("vLLM", True, VLLM_IMAGE)
    assert "gpu_memory_utilization" in ev["memory_note"]
    assert "busy each" in finding.summary and "memory" not in finding.summary


def test_denied_describe_model_leaves_the_stack_unknown_not_the_check(endpoints, infer, at, faults):
    endpoints.endpoint("chat", "ml.g4dn.12xlarge", image=VLLM_IMAGE)
    endpoints.traffic("chat", at, invocations=100, gpu_utilization=380, gpu_memory_utilization=372)
    faults.deny("sagemaker", "DescribeModel")
    report = infer(["accelerator-saturation"], aws_factory=faults.aws_factory)
    [finding] = report.findings
    assert report.errors == []  # the image is evidence, not a judgement
    assert finding.evidence["serving_stack"] is None
    assert finding.evidence["image_unread"] == "AccessDenied: sagemaker:DescribeModel needed"
