from __future__ import annotations

import statistics

from fmdoctor.engine.check import ACCELERATOR_METRICS, Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import INSTANCE_GROUP, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.model import POWER, SM_CLOCK, TENSOR_ACTIVE, UTILIZATION, ClusterMetrics
from fmdoctor.metrics.robust import MIN_POPULATION, Outlier, low_outliers, relative_low_outliers

from ._gpu import (
    IAM_ACTIONS,
    INVENTORY,
    PREFETCH,
    Judged,
    judged_nodes,
    no_tensor_work,
    populations,
    rounded,
    unit,
    utilization_metric,
    window_evidence,
)

# Signals besides utilization, compared where every node of a population publishes them.
WORK_SIGNALS = {POWER: "W", SM_CLOCK: "MHz", TENSOR_ACTIVE: "% tensor activity"}
SIGNAL_TEXT = {UTILIZATION: "utilization", POWER: "power draw", SM_CLOCK: "SM clock", TENSOR_ACTIVE: "tensor activity"}


class GpuStraggler(Check):
    """No busy GPU/Neuron node runs well below its peers: none is gpu.straggler_robust_z modified z-scores
    (median/MAD) below the median and also gpu.straggler_min_gap_percent points below it in utilization, or
    gpu.straggler_min_drop_percent below it in power draw, SM clock or tensor-core activity, compared among nodes
    of its instance type where all of them publish those.

    In a synchronous job every step waits for the slowest rank, so one node held back by throttled clocks, a
    sick GPU, a starved data loader or a thin network path slows the whole cluster. What a utilization-only
    verdict can see: a node whose GPUs sit idle part of each step (a slow data loader, a CPU-bound rank, a job
    that partly died). What it cannot see: a node slowed by its network or a throttled GPU, because NCCL waits
    are kernels too, so a GPU waiting on a slow link reports the same utilization as one computing. Power draw
    and SM clocks (CloudWatch agent nvidia_smi_power_draw, nvidia_smi_clocks_current_sm; DCGM_FI_DEV_POWER_USAGE,
    DCGM_FI_DEV_SM_CLOCK) and tensor-core activity (DCGM profiling DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) fall in those
    cases, so they are compared too where published; the evidence's ``based_on`` names the signals that flagged
    the node. Idle nodes and busy nodes doing no tensor work are left to gpu-idle; nodes are compared only with
    their own accelerator kind and cluster (EC2, or one HyperPod cluster).
    """

    id = "gpu-straggler"
    family = "gpu"
    concerns = frozenset({NODE, INSTANCE_GROUP})
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS
    prefetch = PREFETCH
    inventory = INVENTORY
    metrics = frozenset({ACCELERATOR_METRICS})

    def run(self, ctx: CheckContext) -> list[Finding]:
        gpu = ctx.settings.gpu
        metrics, judged = judged_nodes(ctx, "GPU straggler detection")
        groups = populations(ctx, judged)
        for busy in groups.values():
            for node in no_tensor_work(ctx, busy):
                del busy[node]
        compared = {key: busy for key, busy in groups.items() if len(busy) >= MIN_POPULATION}
        if not compared:
            largest = max((len(b) for b in groups.values()), default=0)
            raise NotApplicable(
                f"needs at least {MIN_POPULATION} busy nodes of one accelerator kind to compare, found {largest}"
            )
        findings = []
        for busy in compared.values():
            flagged, signals = _outliers(busy, gpu.straggler_robust_z, gpu.straggler_min_gap_percent,
                                         gpu.straggler_min_drop_percent)
            findings += [self._finding(ctx, busy[n], found, signals, busy, metrics) for n, found in flagged.items()]
        return findings

    def _finding(self, ctx: CheckContext, j: Judged, found: dict[str, Outlier], signals: list[str],
                 busy: dict[str, Judged], metrics: ClusterMetrics) -> Finding:
        gpu = ctx.settings.gpu
        node, m = j.node, j.metrics
        utilizations = {n: b.metrics.utilization or 0.0 for n, b in busy.items()}
        median = statistics.median(utilizations.values())
        util = utilizations[node.id]
        slowest = min(m.reporting, key=lambda d: d.mean_utilization or 0.0)
        what = unit(m.kind, len(m.reporting))
        if UTILIZATION in found:
            o = found[UTILIZATION]
            lead = (f"{node.label} averaged {o.value:.1f}% utilization on its {what}, {o.gap:.1f} points below "
                    f"the cluster median of {o.median:.1f}% (robust z {o.z:.1f})")
        else:
            signal, o = next(iter(found.items()))
            lead = (f"{node.label} looks busy ({util:.1f}% utilization, like its peers) but its "
                    f"{SIGNAL_TEXT[signal]} averaged {o.value:.1f} {WORK_SIGNALS[signal]}, "
                    f"{100 * o.gap / o.median:.0f}% below the cluster median of {o.median:.1f} (robust z {o.z:.1f})")
        also = [SIGNAL_TEXT[s] for s in found if s != next(iter(found))]
        return self.finding(
            resource=node.id,
            summary=(
                f"{lead}{'; its ' + ' and '.join(also) + ' also lag' if also else ''}. Based on "
                f"{', '.join(SIGNAL_TEXT[s] for s in found)}: it is likely slowing every step; check its clocks "
                "and throttle reasons, Xid errors and EFA counters before draining it."
            ),
            evidence={
                "instance": node.id,
                "based_on": list(found),
                "signals_compared": signals,
                "utilization_percent": rounded(util),
                "cluster_median_percent": rounded(median),
                "gap_points": rounded(median - util),
                "robust_z": rounded(found[UTILIZATION].z, 2) if UTILIZATION in found else None,
                "mad_points": rounded(found[UTILIZATION].mad, 2) if UTILIZATION in found else None,
                "signals": {s: {"value": rounded(o.value), "cluster_median": rounded(o.median),
                                "robust_z": rounded(o.z, 2)} for s, o in found.items()},
                "z_threshold": gpu.straggler_robust_z,
                "min_gap_points": gpu.straggler_min_gap_percent,
                "min_drop_percent": gpu.straggler_min_drop_percent,
                "nodes_compared": len(busy),
                "slowest_device": {"device": slowest.device,
                                   "utilization_percent": rounded(slowest.mean_utilization)},
                "instance_type": node.instance_type,
                "source": m.source,
                **utilization_metric(m),
                **window_evidence(ctx, metrics),
            },
        )


def _outliers(busy: dict[str, Judged], z: float, min_gap: float,
              min_drop: float) -> tuple[dict[str, dict[str, Outlier]], list[str]]:
    """Per flagged node, the signals it is a low outlier on; and the signals compared.

    Utilization (a share of time) compares across instance types; power and clocks are the GPU model's own
    (an A100 draws half an H100's watts), so they are compared only among nodes of one instance type."""
    flagged: dict[str, dict[str, Outlier]] = {}
    utilization = {n: j.metrics.utilization or 0.0 for n, j in busy.items()}
    for o in low_outliers(utilization, z, min_gap):
        flagged.setdefault(o.key, {})[UTILIZATION] = o
    compared = [UTILIZATION]
    by_type: dict[str, dict[str, Judged]] = {}
    for n, j in busy.items():
        by_type.setdefault(j.node.instance_type, {})[n] = j
    for signal in WORK_SIGNALS:
        for same in by_type.values():
            values = {n: j.metrics.mean(signal) for n, j in same.items()}
            if len(values) < MIN_POPULATION or any(v is None for v in values.values()):
                continue  # compare a signal only where every node of the type publishes it
            if signal not in compared:
                compared.append(signal)
            for o in relative_low_outliers({n: v for n, v in values.items() if v is not None}, z, min_drop):
                flagged.setdefault(o.key, {})[signal] = o
    return flagged, compared
