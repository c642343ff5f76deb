from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.model import XID, ClusterMetrics, DeviceMetrics, Point
from fmdoctor.metrics.targets import MetricNode
from fmdoctor.node import xid as catalogue

from ._common import id_list, plural
from ._gpu import IAM_ACTIONS, INVENTORY, judged_nodes, utilization_metric, window_evidence

ROW_REMAP_FAILURE = "row_remap_failure"
Event = tuple[DeviceMetrics, int, str, str, str, bool]  # device, xid, meaning, action, period end, held
SEVERITY = {catalogue.MONITOR: Severity.INFO, catalogue.RESTART_APP: Severity.WARNING}  # the rest: critical
ACTION_RANK = catalogue.ACTION_RANK
# A row remap failure needs the GPU replaced, as Xid 64 does.
ROW_REMAP = (64, "Row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE): no spare rows left", catalogue.ISOLATE)


def xid_verdict(code: int) -> tuple[str, str]:
    """(meaning, action) of an Xid code by the on-node Xid catalogue, the one place fmdoctor classifies Xids."""
    info = catalogue.CATALOGUE.get(code)
    if info is None:
        return "Not in fmdoctor's catalogue; see NVIDIA's Xid documentation", catalogue.MONITOR
    return info.meaning, info.action


class GpuXidMetrics(Check):
    """No GPU of the cluster reported, in its metrics, an NVIDIA Xid error during the window, nor a failed row
    remapping: read for every node at once from the DCGM exporter (DCGM_FI_DEV_XID_ERRORS, the value of the last
    Xid seen; DCGM_FI_DEV_ROW_REMAP_FAILURE), without logging into a node.

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
    severity = Severity.CRITICAL
    iam_actions = IAM_ACTIONS
    inventory = INVENTORY

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
        events.sort(key=lambda e: (-ACTION_RANK[e[3]], e[0].device))
        device, code, meaning, action, when, held = events[0]
        others = len({(e[0].device, e[1]) for e in events}) - 1
        also = f" and {others} more" if others else ""
        since = "held from before the window" if held else f"first reported in the period ending {when}"
        return self.finding(
            resource=node.id,
            summary=(f"GPU {device.device} of {node.label} reported Xid {code} ({meaning}), {since}{also}: "
                     f"{catalogue.ACTION_TEXT[action]}."),
            severity=SEVERITY.get(action, Severity.CRITICAL),
            evidence={
                "instance": node.id,
                "action": action,
                "xids": [{"gpu": d.device, "xid": c, "meaning": m, "action": a, "first_period_end": w,
                          "held_from_before_window": h} for d, c, m, a, w, h in events],
                "instance_type": node.instance_type,
                "hyperpod_cluster": node.group.removeprefix("hyperpod:") if node.hyperpod else None,
                "source": "prometheus",
                **where,
                **window_evidence(ctx, metrics),
            },
        )


def _events(device: DeviceMetrics) -> list[tuple[int, str, str, str, bool]]:
    """(xid, meaning, action, when, held) per Xid the device reported: a change to a code inside the window, or a
    code held since before it that needs a reset, reboot or replacement."""
    found = []
    points: list[Point] = list(device.signals.get(XID, ()))
    for i, (when, value) in enumerate(points):
        code = int(value)
        previous = int(points[i - 1][1]) if i else None
        if code == 0 or code == previous:
            continue
        meaning, action = xid_verdict(code)
        held = previous is None  # already set when the window began: when it happened is unknown
        if held and ACTION_RANK[action] < ACTION_RANK[catalogue.RESET]:
            continue
        found.append((code, meaning, action, when.isoformat(timespec="seconds"), held))
    if any(v >= 1 for _, v in device.signals.get(ROW_REMAP_FAILURE, ())):
        when = next(t for t, v in device.signals[ROW_REMAP_FAILURE] if v >= 1)
        found.append((ROW_REMAP[0], ROW_REMAP[1], ROW_REMAP[2], when.isoformat(timespec="seconds"), False))
    return found
