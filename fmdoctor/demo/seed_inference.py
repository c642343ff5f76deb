"""The demo's inference side: a chat endpoint over its latency SLO at its scaling limit, and a healthy one.

``demo-llm-chat`` (4 x ml.g4dn.12xlarge, auto scaling 1-4, so at its maximum) has a p90 ModelLatency of
1.6 s against a 500 ms SLO with its four T4s 93 % busy each (SageMaker reports 372 %, the sum over four
GPUs); the platform overhead is a few milliseconds, so the model, starved of capacity, is slow.
``demo-embeddings`` (2 x ml.g4dn.xlarge, scaling 1-6) is fast, lightly loaded and nearly error-free:
it must stay silent. Both are tagged with the demo cluster; moto accepts only older instance types for
endpoint configs (ml.g4dn, ml.p3, ml.inf1), which is why these are g4dn.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from fmdoctor.demo.endpoint_builder import EndpointBuilder

if TYPE_CHECKING:
    from fmdoctor.demo.scenario import DemoWorld  # scenario lists this seeder

CHAT = "demo-llm-chat"
EMBEDDINGS = "demo-embeddings"


def seed_inference(world: DemoWorld) -> None:
    now = datetime.now(UTC)
    b = EndpointBuilder(world.session, world.cluster)
    b.endpoint(CHAT, "ml.g4dn.12xlarge", instances=4)
    b.autoscale(CHAT, min_capacity=1, max_capacity=4)
    b.traffic(
        CHAT, now,
        model_latency_us={350_000: 40, 900_000: 45, 1_600_000: 10, 3_200_000: 5},
        overhead_latency_us={6_000: 95, 14_000: 5},
        invocations=100, gpu_utilization=372.0, gpu_memory_utilization=300.0,
    )
    b.endpoint(EMBEDDINGS, "ml.g4dn.xlarge", instances=2)
    b.autoscale(EMBEDDINGS, min_capacity=1, max_capacity=6)
    b.traffic(
        EMBEDDINGS, now,
        model_latency_us={18_000: 70, 35_000: 25, 80_000: 5},
        overhead_latency_us={4_000: 100},
        invocations=600, errors_5xx=1, gpu_utilization=45.0, gpu_memory_utilization=30.0,
    )
    world.facts["endpoints"] = {"slow_at_max": CHAT, "healthy": EMBEDDINGS}
    world.settings.setdefault("inference", {}).update(latency_p90_ms=500, latency_p99_ms=2000)
