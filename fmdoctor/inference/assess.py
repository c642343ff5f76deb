"""Pure judgements over the inference signals: latency against the SLO, error rates, compute load.

Shared by the checks that report them and by ``autoscaling-at-max``, which needs to know whether a
variant at its scaling limit is under pressure without depending on another check having run.

Saturation is compute saturation: GPU or Neuron core utilisation, or a serverless endpoint's concurrency at
its MaxConcurrency. GPU memory alone never is: LLM servers reserve most of it at start-up
(:mod:`fmdoctor.inference.stacks`), so it is reported beside utilisation, never judged on its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from fmdoctor.config import ClusterSettings
from fmdoctor.engine.endpoint_details import InferenceComponent
from fmdoctor.engine.endpoints import Endpoint, EndpointVariant
from fmdoctor.engine.inventory import Instance, InstanceTypeInfo
from fmdoctor.engine.model import Severity
from fmdoctor.inference import kinds
from fmdoctor.inference.signals import Signals, is_neuron_type, latency_ms, looks_accelerated

NO_GPU_DATA = ("NoData", "no GPU utilisation datapoints in the window")
NO_NEURON_DATA = ("NoData", "no Neuron core utilisation datapoints in the window")
NO_CONCURRENCY_DATA = ("NoData", "no ServerlessConcurrentExecutionsUtilization datapoints in the window")


@dataclass(frozen=True)
class LatencyBreach:
    severity: Severity
    percentiles: tuple[str, ...]  # "p90", "p99": which ones are above their SLO


def latency_breach(p90_ms: float | None, p99_ms: float | None, slo_p90_ms: float, slo_p99_ms: float
                   ) -> LatencyBreach | None:
    """A p90 above its SLO is critical (one request in ten or more is too slow); a p99 alone is a warning."""
    over = tuple(p for p, value, slo in (("p90", p90_ms, slo_p90_ms), ("p99", p99_ms, slo_p99_ms))
                 if value is not None and value > slo)
    if not over:
        return None
    return LatencyBreach(Severity.CRITICAL if "p90" in over else Severity.WARNING, over)


@dataclass(frozen=True)
class VariantLatency:
    """ModelLatency (the container) and OverheadLatency (SageMaker's side) of a variant, in milliseconds."""

    model_p90_ms: float | None
    model_p99_ms: float | None
    overhead_p90_ms: float | None
    overhead_p99_ms: float | None

    @classmethod
    def of(cls, sig: Signals, target: str) -> VariantLatency:
        # ModelLatency and OverheadLatency are published in microseconds.
        return cls(*(latency_ms(sig.get(target, s), "microseconds")
                     for s in ("model_p90", "model_p99", "overhead_p90", "overhead_p99")))

    def breach(self, settings: ClusterSettings) -> LatencyBreach | None:
        slo = settings.inference
        return latency_breach(self.model_p90_ms, self.model_p99_ms, slo.latency_p90_ms, slo.latency_p99_ms)

    def overhead_breach(self, settings: ClusterSettings) -> LatencyBreach | None:
        slo = settings.inference
        return latency_breach(self.overhead_p90_ms, self.overhead_p99_ms, slo.latency_p90_ms, slo.latency_p99_ms)


def error_rates(requests: float | None, errors: dict[str, float | None]) -> dict[str, float] | None:
    """Each error count as a percentage of ``requests`` (Invocations, or InvocationsProcessed for an
    asynchronous endpoint); None when there is no denominator (the metric was not published, or is zero).

    The denominator is never the error count itself: errors without requests to divide them by are not a
    100 % error rate, they are unverified. A count above its denominator (datapoints of the two metrics
    landing in different minutes) reads 100 %.
    """
    if not requests:
        return None
    return {name: min(100.0, 100.0 * (count or 0.0) / requests) for name, count in errors.items()}


@dataclass(frozen=True)
class Load:
    """How busy one target's compute was over the window (0-100 % per accelerator, or of the concurrency limit)."""

    target: str
    kind: str  # "gpu", "neuron" or "concurrency" (a serverless endpoint's executions over MaxConcurrency)
    accelerators: float  # GPUs (or Neuron devices) per instance, or per inference-component copy
    utilization_percent: float | None = None
    memory_percent: float | None = None  # reported, never judged
    raw: dict[str, float] = field(default_factory=dict)  # as CloudWatch returned them
    unmeasured: tuple[str, str] | None = None  # (code, why) there is no number: NoData, UnknownInstanceType

    def saturated(self, threshold: float) -> bool:
        return self.utilization_percent is not None and self.utilization_percent >= threshold

    def peak(self) -> float:
        return self.utilization_percent or 0.0


def variant_load(sig: Signals, endpoint: Endpoint, variant: EndpointVariant,
                 types: dict[str, InstanceTypeInfo]) -> Load | None:
    """None when the variant has no compute of its own to measure: CPU instances, no instance running (an
    asynchronous endpoint scaled to zero), or inference components (measured per component)."""
    target = endpoint.variant_resource(variant)
    kind = kinds.kind_of(endpoint, variant)
    if kind == kinds.SERVERLESS:
        share = sig.get(target, "concurrency_max")
        return Load(target, "concurrency", 0, None if share is None else 100.0 * share, None,
                    _present(ServerlessConcurrentExecutionsUtilization=share),
                    None if share is not None else NO_CONCURRENCY_DATA)
    if kind == kinds.COMPONENTS or variant.current_instances == 0:
        return None
    info = types.get(variant.instance_type or "")
    if is_neuron_type(variant.instance_type):
        value = sig.get(target, "neuron_util")
        return Load(target, "neuron", info.neuron_devices if info else 0, value, None, _present(neuron_util=value),
                    None if value is not None else NO_NEURON_DATA)
    if info is None:
        if variant.instance_type is not None and not looks_accelerated(variant.instance_type):
            return None
        why = (f"the GPU count of {variant.instance_type} is unknown (EC2 does not list it in this region)"
               if variant.instance_type else "the variant's instance type could not be read (DescribeEndpointConfig)")
        return Load(target, "gpu", 0, unmeasured=("UnknownInstanceType", why))
    if not info.gpus:
        return None
    util, memory = sig.get(target, "gpu_util"), sig.get(target, "gpu_memory")
    # SageMaker sums GPUUtilization/GPUMemoryUtilization over the instance's GPUs (0-400 % on four).
    return Load(
        target, "gpu", info.gpus,
        utilization_percent=None if util is None else util / info.gpus,
        memory_percent=None if memory is None else memory / info.gpus,
        raw=_present(GPUUtilization=util, GPUMemoryUtilization=memory),
        unmeasured=None if util is not None else NO_GPU_DATA,
    )


def component_load(sig: Signals, component: InferenceComponent, instance_type: str | None) -> Load | None:
    """An inference component's GPUs, as SageMaker normalises them over what each copy reserved (0-100 %);
    None for a component that reserves no accelerator."""
    if not component.accelerators_per_copy:
        return None
    target = component.resource
    if is_neuron_type(instance_type):
        why = "SageMaker publishes GPU metrics per inference component, none for Neuron"
        return Load(target, "neuron", component.accelerators_per_copy, unmeasured=("NotPublished", why))
    util, memory = sig.get(target, "gpu_util"), sig.get(target, "gpu_memory")
    return Load(target, "gpu", component.accelerators_per_copy, util, memory,
                _present(GPUUtilizationNormalized=util, GPUMemoryUtilizationNormalized=memory),
                None if util is not None else NO_GPU_DATA)


def node_load(sig: Signals, node: Instance, info: InstanceTypeInfo) -> Load | None:
    """A fleet node's load from the CloudWatch agent (already per GPU) or neuron-monitor."""
    if info.neuron_devices:
        value = sig.get(node.id, "neuron_util")
        return Load(node.id, "neuron", info.neuron_devices, value, None, _present(neuron_util=value),
                    None if value is not None else NO_NEURON_DATA)
    if not info.gpus:
        return None
    util = sig.get(node.id, "gpu_util")
    used, total = sig.get(node.id, "gpu_memory_used"), sig.get(node.id, "gpu_memory_total")
    memory = 100.0 * used / total if used is not None and total else None
    return Load(node.id, "gpu", info.gpus, util, memory,
                _present(gpu_util=util, gpu_memory_used=used, gpu_memory_total=total),
                None if util is not None else NO_GPU_DATA)


def _present(**values: float | None) -> dict[str, float]:
    return {k: round(v, 2) for k, v in values.items() if v is not None}


def accelerated_fleet(nodes: list[Instance], types: dict[str, InstanceTypeInfo]) -> Iterator[
        tuple[Instance, InstanceTypeInfo]]:
    for node in nodes:
        info = types.get(node.instance_type)
        if info is not None and info.accelerated:
            yield node, info


def ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
