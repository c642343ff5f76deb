"""The demo's inference side: a chat endpoint over its latency SLO at its scaling limit, a failed canary, a
reranker failing requests, a forgotten summarizer, an asynchronous endpoint whose queue grows while it sits at
zero instances, and two healthy endpoints, one of them a vLLM server with its GPU memory 92 % full.

``demo-llm-chat`` (4 x ml.g4dn.12xlarge, auto scaling 1-4, so at its maximum) has a p90 ModelLatency of
1.6 s against a 500 ms SLO with its four T4s 93 % busy each (SageMaker reports 372 %, the sum over four
GPUs); the platform overhead is a few milliseconds, so the model, starved of capacity, is slow.
``demo-llm-chat-canary``, the next chat model deployed beside it, never came up: its container did not
pass the ping health check and the endpoint is Failed. ``demo-reranker``'s new model raises on inputs over
its token limit: 4 % of its invocations end in InvocationModelErrors, while its latency and GPU are fine.
``demo-summarizer`` (ml.g4dn.2xlarge) was stood up three days ago for an evaluation and forgotten: no
invocations, its GPU idle with the weights loaded. ``demo-doc-batch`` is asynchronous and scaled in to zero
instances with only a target-tracking policy, which cannot scale out from zero: its queue has grown from
nothing to 26 requests in ten minutes and nothing processes it (no InvocationsProcessed; it publishes no
Invocations at all, being asynchronous). ``demo-embeddings`` (2 x ml.g4dn.xlarge, scaling 1-6) is fast,
lightly loaded and nearly error-free, and ``demo-llm-vllm`` (2 x ml.g4dn.12xlarge on the vLLM container,
scaling 1-4) serves within its SLO with its GPUs 60 % busy and their memory 92 % full, as vLLM reserves it
for its KV cache: both must stay silent, as each faulty endpoint must trip only its own check. All are
tagged with the demo cluster; moto accepts only older instance types for endpoint configs (ml.g4dn, ml.p3,
ml.inf1), which is why these are g4dn.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from fmdoctor.demo.endpoint_builder import VLLM_IMAGE, EndpointBuilder
from fmdoctor.demo.moto_health import backdate_endpoint, fail_endpoint

if TYPE_CHECKING:
    from fmdoctor.demo.scenario import DemoWorld  # scenario lists this seeder

CHAT = "demo-llm-chat"
CANARY = "demo-llm-chat-canary"
RERANKER = "demo-reranker"
SUMMARIZER = "demo-summarizer"
EMBEDDINGS = "demo-embeddings"
ASYNC_BATCH = "demo-doc-batch"
VLLM = "demo-llm-vllm"
# SageMaker's own words when a container never answers /ping within the startup health check timeout.
PING_FAILED = ("The primary container for production variant AllTraffic did not pass the ping health check. "
               "Please check CloudWatch logs for this endpoint.")


def seed_inference(world: DemoWorld) -> None:
    now = datetime.now(UTC)
    b = EndpointBuilder(world.session, world.cluster, metrics_backend=world.cloudwatch_backend())
    b.endpoint(CHAT, "ml.g4dn.12xlarge", instances=4)
    b.autoscale(CHAT, min_capacity=1, max_capacity=4)
    b.traffic(
        CHAT, now,
        model_latency_us={350_000: 40, 900_000: 45, 1_600_000: 10, 3_200_000: 5},
        overhead_latency_us={6_000: 95, 14_000: 5},
        invocations=100, gpu_utilization=372.0, gpu_memory_utilization=300.0,
    )
    # Fault: the canary's deployment failed 25 minutes ago, after SageMaker's health checks gave up.
    b.endpoint(CANARY, "ml.g4dn.12xlarge")
    backdate_endpoint(world.session, world.region, CANARY, now - timedelta(minutes=40))
    fail_endpoint(world.session, world.region, CANARY, PING_FAILED, now - timedelta(minutes=25))
    # Fault: 12 of every 300 requests a minute end in model errors (4 %, over the 1 % threshold).
    b.endpoint(RERANKER, "ml.g4dn.xlarge")
    backdate_endpoint(world.session, world.region, RERANKER, now - timedelta(days=6))
    b.traffic(
        RERANKER, now,
        model_latency_us={25_000: 80, 60_000: 18, 140_000: 2},
        overhead_latency_us={3_000: 100},
        invocations=300, model_errors=12, gpu_utilization=38.0, gpu_memory_utilization=41.0,
    )
    # Fault: no invocations for days; SageMaker still publishes the instance's GPU metrics (weights in memory).
    b.endpoint(SUMMARIZER, "ml.g4dn.2xlarge")
    backdate_endpoint(world.session, world.region, SUMMARIZER, now - timedelta(days=3))
    b.traffic(SUMMARIZER, now, gpu_utilization=0.0, gpu_memory_utilization=23.0)
    b.endpoint(EMBEDDINGS, "ml.g4dn.xlarge", instances=2)
    b.autoscale(EMBEDDINGS, min_capacity=1, max_capacity=6)
    b.traffic(
        EMBEDDINGS, now,
        model_latency_us={18_000: 70, 35_000: 25, 80_000: 5},
        overhead_latency_us={4_000: 100},
        invocations=600, errors_5xx=1, gpu_utilization=45.0, gpu_memory_utilization=30.0,
    )
    # Fault: scaled in to zero with a target-tracking policy only; requests queue and nothing scales out.
    b.endpoint(ASYNC_BATCH, "ml.g4dn.xlarge", async_output=f"s3://{world.cluster}-async/doc-batch/",
               async_max_concurrency=4)
    backdate_endpoint(world.session, world.region, ASYNC_BATCH, now - timedelta(days=2))
    b.autoscale(ASYNC_BATCH, min_capacity=0, max_capacity=4, backlog_per_instance=5)
    b.scale(ASYNC_BATCH, 0)
    b.async_traffic(ASYNC_BATCH, now, backlog=[0, 1, 3, 6, 9, 12, 15, 19, 22, 26],
                    oldest_age_s=[0, 48, 106, 167, 229, 288, 349, 408, 469, 530])
    # Healthy: vLLM reserves most of each GPU's memory for its KV cache; compute is what shows load.
    b.endpoint(VLLM, "ml.g4dn.12xlarge", instances=2, image=VLLM_IMAGE)
    b.autoscale(VLLM, min_capacity=1, max_capacity=4)
    b.traffic(
        VLLM, now,
        model_latency_us={140_000: 60, 260_000: 32, 420_000: 7, 900_000: 1},
        overhead_latency_us={5_000: 100},
        invocations=240, gpu_utilization=240.0, gpu_memory_utilization=368.0,
    )
    world.facts["endpoints"] = {"slow_at_max": CHAT, "failed": CANARY, "erroring": RERANKER, "idle": SUMMARIZER,
                                "queue_growing": ASYNC_BATCH, "healthy": EMBEDDINGS, "healthy_llm": VLLM}
    world.settings.setdefault("inference", {}).update(latency_p90_ms=500, latency_p99_ms=2000)
