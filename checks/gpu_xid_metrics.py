from __future__ import annotations

from dataclasses import replace

from fmdoctor.engine.check import ACCELERATOR_METRICS, Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import INSTANCE_GROUP, NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.dcgm import ECC_DBE
from fmdoctor.metrics.model import XID, ClusterMetrics, DeviceMetrics, Point
from fmdoctor.metrics.targets import MetricNode
from fmdoctor.node.xid_catalogue import ACTION_ORDER, CATALOGUE_URL, RESOLUTIONS, XidVerdict, xid_verdict

from ._common import id_list, plural
from ._gpu import IAM_ACTIONS, INVENTORY, PREFETCH, judged_nodes, utilization_metric, window_evidence

ROW_REMAP_FAILURE = "row_remap_failure"
Event = tuple[DeviceMetrics, int, XidVerdict, str, bool]  # device, xid, NVIDIA's verdict, period end, held
# A failed row remapping leaves no spare rows: the GPU is replaced (node-gpu-health judges it the same way).
_REPLACE = RESOLUTIONS["CONTACT_SUPPORT"]
ROW_REMAP = XidVerdict(64, "ROW_REMAP_FAILURE", "Row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE): no spare rows "
                       "left", (), "CONTACT_SUPPORT", _REPLACE.severity, _REPLACE.action, _REPLACE.text)
# Uncorrectable ECC errors are what the kernel logs as Xid 48 (Double Bit ECC Error): NVIDIA's verdict for it,
# as node-gpu-health judges nvidia-smi's ecc.errors.uncorrected.volatile.total (reset the GPU).
ECC_DBE_VERDICT = replace(xid_verdict(48), mnemonic="ECC_DBE_VOL_TOTAL", description=(
    "Uncorrectable (double-bit) ECC errors since the driver loaded (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)"))


def _rank(verdict: XidVerdict) -> int:
    return ACTION_ORDER.index(verdict.action)


def _meaning(verdict: XidVerdict) -> str:
    return verdict.description or "not in NVIDIA's Xid catalogue as fmdoctor keeps it"


class GpuXidMetrics(Check):
    """No GPU of the cluster reported, in its metrics, an NVIDIA Xid error during the window, nor a failed row
    remapping: read for every node at once from the DCGM exporter (DCGM_FI_DEV_XID_ERRORS, the value of the last
    Xid seen; DCGM_FI_DEV_ROW_REMAP_FAILURE; DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, uncorrectable ECC errors, where the
    exporter publishes it), without logging into a node.

    Each Xid is judged as the on-node gpu-xid check judges a kernel-log line, by NVIDIA's Xid catalogue
    (docs.nvidia.com/deploy/xid-errors): reset, reboot or replace is critical, an application restart a warning,
    the rest informational. DCGM_FI_DEV_XID_ERRORS keeps its last value, so an Xid counts when the value changes
    to it inside the window; a value held from before the window is reported only when it needs a reset, reboot
    or replacement (those stand until done), never an old application-level one. The CloudWatch agent and
    Container Insights publish no Xid metric: nodes read from them are reported as not verified here (run gpu-xid
    on the node, or point metrics.url at the DCGM exporter's Prometheus).
    """

    id = "gpu-xid-metrics"
    family = "gpu"
    concerns = frozenset({NODE, INSTANCE_GROUP})
    severity = Severity.CRITICAL
    iam_actions = IAM_ACTIONS
    prefetch = PREFETCH
    inventory = INVENTORY
    metrics = frozenset({ACCELERATOR_METRICS})

    def run(self, ctx: CheckContext) -> list[Finding]:
        metrics, judged = judged_nodes(ctx, "Xid errors")
        blind = [j.node.label for j in judged if j.metrics.kind == "gpu" and not j.metrics.publishes_signal(XID)]
        if blind:
            ctx.unverified(
                f"Xid errors of {plural(len(blind), 'node')} whose metrics carry none ({id_list(blind)})",
                code="NoXidMetric",
                message="the CloudWatch agent and Container Insights publish no Xid metric: run gpu-xid on the node "
                        "(fmdoctor check --local) or point metrics.url at the DCGM exporter's Prometheus",
            )
        findings = []
        for j in judged:
            events = [(d, *e) for d in j.metrics.reporting for e in _events(d)]
            if events:
                findings.append(self._finding(ctx, j.node, events, utilization_metric(j.metrics), metrics))
        return findings

    def _finding(self, ctx: CheckContext, node: MetricNode, events: list[Event], where: dict[str, str],
                 metrics: ClusterMetrics) -> Finding:
        events.sort(key=lambda e: (-e[2].severity.rank, -_rank(e[2]), e[0].device))
        device, code, verdict, when, held = events[0]
        others = len({(e[0].device, e[1]) for e in events}) - 1
        also = f" and {others} more" if others else ""
        since = "held from before the window" if held else f"first reported in the period ending {when}"
        return self.finding(
            resource=node.id,
            summary=(f"GPU {device.device} of {node.label} reported Xid {code} ({_meaning(verdict)}), {since}{also}: "
                     f"{verdict.action_text}."),
            severity=verdict.severity,
            evidence={
                "instance": node.id,
                "action": verdict.action,
                "action_text": verdict.action_text,
                "catalogue": CATALOGUE_URL,
                "xids": [{"gpu": d.device, "xid": c, "meaning": _meaning(v), "action": v.action,
                          "catalogue_resolution": v.resolution, "first_period_end": w, "held_from_before_window": h}
                         for d, c, v, w, h in events],
                "instance_type": node.instance_type,
                "hyperpod_cluster": node.group.removeprefix("hyperpod:") if node.hyperpod else None,
                "source": "prometheus",
                **where,
                **window_evidence(ctx, metrics),
            },
        )


def _events(device: DeviceMetrics) -> list[tuple[int, XidVerdict, str, bool]]:
    """(xid, verdict, when, held) per Xid the device reported: a change to a code inside the window, or a
    code held since before it that needs a reset, reboot or replacement."""
    found = []
    points: list[Point] = list(device.signals.get(XID, ()))
    for i, (when, value) in enumerate(points):
        code = int(value)
        previous = int(points[i - 1][1]) if i else None
        if code == 0 or code == previous:
            continue
        verdict = xid_verdict(code)
        held = previous is None  # already set when the window began: when it happened is unknown
        if held and _rank(verdict) < ACTION_ORDER.index("reset"):
            continue
        found.append((code, verdict, when.isoformat(timespec="seconds"), held))
    ecc = list(device.signals.get(ECC_DBE, ()))
    rise = next((i for i, (_, v) in enumerate(ecc) if v >= 1 and (i == 0 or v > ecc[i - 1][1])), None)
    if rise is not None:  # a count held from before the window stands until the GPU is reset, like the on-node one
        found.append((ECC_DBE_VERDICT.code, ECC_DBE_VERDICT, ecc[rise][0].isoformat(timespec="seconds"), rise == 0))
    if any(v >= 1 for _, v in device.signals.get(ROW_REMAP_FAILURE, ())):
        when = next(t for t, v in device.signals[ROW_REMAP_FAILURE] if v >= 1)
        found.append((ROW_REMAP.code, ROW_REMAP, when.isoformat(timespec="seconds"), False))
    return found
