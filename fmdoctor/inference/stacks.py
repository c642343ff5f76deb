"""The serving stack a model runs on, recognised from its container image, and what that means for GPU memory.

LLM servers reserve most of each GPU's memory at start-up for their KV cache, whatever the load, so GPU memory
near full is their normal state, not saturation:
- vLLM: ``gpu_memory_utilization`` of each GPU for weights and KV cache, 0.92 by default in current releases
  (0.9 before); vllm-project/vllm ``vllm/config/cache.py`` (CacheConfig.gpu_memory_utilization);
- TensorRT-LLM (and Triton's TensorRT-LLM backend): ``KvCacheConfig.free_gpu_memory_fraction``, 0.9 of the
  memory left after the weights; nvidia.github.io/TensorRT-LLM/examples/kvcacheconfig.html;
- Text Generation Inference: ``--max-batch-total-tokens`` is inferred to fill the memory left under
  ``--cuda-memory-fraction`` (1.0 by default); huggingface/text-generation-inference
  ``docs/source/reference/launcher.md``;
- DJL Large Model Inference (LMI): its vLLM and lmi-dist backends take ``option.gpu_memory_utilization``
  (0.9 by default); deepjavalibrary/djl-serving ``serving/docs/lmi/user_guides/vllm_user_guide.md``;
- NeuronX (transformers-neuronx, optimum-neuron, NxD Inference): the model is compiled for a fixed batch and
  sequence length and its device memory is allocated when it loads;
- Triton: only its TensorRT-LLM backend reserves a KV cache (``kv_cache_free_gpu_mem_fraction``,
  triton-inference-server/tensorrtllm_backend), and a plain ``tritonserver`` image does not say which
  backend it runs, so high memory is not assumed for it.

Image names follow the AWS Deep Learning Containers (``huggingface-pytorch-tgi-inference``, ``djl-inference``
with ``lmi``/``tensorrtllm``/``neuronx`` tags, ``sagemaker-tritonserver``) and the projects' own images
(``vllm/vllm-openai``, ``ghcr.io/huggingface/text-generation-inference``, ``nvcr.io/nvidia/tritonserver``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ServingStack:
    name: str
    memory_note: str  # what the stack does with GPU memory
    preallocates: bool = True  # reserves most GPU memory at start-up: high memory is expected


NEURONX = ServingStack("NeuronX", "Neuron compiles the model for a fixed batch and sequence length and allocates its "
                                  "device memory when it loads")
TENSORRT_LLM = ServingStack("TensorRT-LLM", "TensorRT-LLM gives free_gpu_memory_fraction (0.9 by default) of the "
                                            "memory left after the weights to its KV cache")
VLLM = ServingStack("vLLM", "vLLM reserves gpu_memory_utilization (0.92 by default, 0.9 in older releases) of "
                            "every GPU for weights and KV cache at start-up")
TGI = ServingStack("TGI", "TGI sizes its KV cache (max-batch-total-tokens) to fill the memory left under "
                          "cuda-memory-fraction (1.0 by default)")
LMI = ServingStack("DJL LMI", "LMI's vLLM and lmi-dist backends reserve option.gpu_memory_utilization (0.9 by "
                              "default) of every GPU for the KV cache")
TRITON = ServingStack("Triton", "Triton reserves memory for a KV cache only with its TensorRT-LLM backend "
                                "(kv_cache_free_gpu_mem_fraction); the image does not say which backend runs",
                      preallocates=False)

# First match wins: a DJL image tagged for TensorRT-LLM or NeuronX runs that engine, not LMI's default.
PATTERNS = (
    (re.compile(r"neuronx|optimum-neuron"), NEURONX),
    (re.compile(r"tensorrt-?llm|trtllm"), TENSORRT_LLM),
    (re.compile(r"vllm"), VLLM),
    (re.compile(r"\btgi|text-generation-inference"), TGI),
    (re.compile(r"djl-inference|djl-serving|\blmi"), LMI),
    (re.compile(r"tritonserver"), TRITON),
)


def serving_stack(image: str | None) -> ServingStack | None:
    """The stack an image (repository and tag, without the registry) runs, or None when it is none we know."""
    if not image:
        return None
    path = image.lower().split("@", 1)[0]
    first, _, rest = path.partition("/")
    name = rest if rest and ("." in first or ":" in first) else path  # drop a registry host
    return next((stack for pattern, stack in PATTERNS if pattern.search(name)), None)


def stack_evidence(image: str | None, image_unread: str | None = None) -> dict[str, object]:
    """Evidence on the serving stack: the image, the stack, and whether high GPU memory is expected on it."""
    stack = serving_stack(image)
    evidence: dict[str, object] = {"image": image, "serving_stack": stack.name if stack else None,
                                   "high_memory_expected": bool(stack and stack.preallocates)}
    if stack:
        evidence["memory_note"] = stack.memory_note
    if image_unread:
        evidence["image_unread"] = image_unread
    return evidence
