from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.model import XID, ClusterMetrics, DeviceMetrics, Point
from fmdoctor.metrics.targets import MetricNode
from fmdoctor.node.xid_catalogue import ACTION_ORDER, CATALOGUE_URL, XidVerdict, xid_verdict

from ._common import id_list, plural
from ._gpu import IAM_ACTIONS, INVENTORY, judged_nodes, utilization_metric, window_evidence

ROW_REMAP_FAILURE = "row_remap_failure"
# device, xid, meaning, action, severity, what to do, period end, held
Event = tuple[DeviceMetrics, int, str, str, Severity, str, str, bool]
# A row remap failure needs the GPU replaced: the GPU has no spare rows left, worse than any reset.
ISOLATE = "isolate"
ROW_REMAP = (64, "Row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE): no spare rows left", ISOLATE,
             Severity.CRITICAL, "take the GPU out of service (drain the node and replace it)")


def _meaning(verdict: XidVerdict) -> str:
    if not verdict.in_catalogue:
        return "Not in NVIDIA's Xid catalogue as fmdoctor keeps it"
    return verdict.description if verdict.description and verdict.description != "Unused" else verdict.mnemonic


def _rank(event: Event) -> tuple[int, int]:
    """Worst first: severity, then the action's weight in NVIDIA's catalogue order; isolate above all."""
    _, _, _, action, severity, *_ = event
    return severity.rank, len(ACTION_ORDER) if action == ISOLATE else ACTION_ORDER.index(action)


class GpuXidMetrics(Check):
    """No GPU of the cluster reported, in its metrics, an NVIDIA Xid error during the window, nor a failed row
    remapping: read for every node at once from the DCGM exporter (DCGM_FI_DEV_XID_ERRORS, the value of the last
    Xid seen; DCGM_FI_DEV_ROW_REMAP_FAILURE), without logging into a node.

    Each Xid is judged as the on-node gpu-xid check judges a kernel-log line, by NVIDIA's Xid catalogue kept as
    data (fmdoctor/node/xid_catalogue.py; https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html):
    its immediate action decides the severity and what to do (reset, reboot, contact support... critical; an
    application restart a warning; IGNORE informational). DCGM_FI_DEV_XID_ERRORS keeps its last value, so an Xid
    counts when the value changes to it inside the window; a value held from before the window is reported only
    when the catalogue judges it critical (a reset, reboot or replacement stands until done), never an old
    application-level one. A failed row remapping needs the GPU replaced (action 'isolate'). The CloudWatch agent and
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
        events.sort(key=lambda e: (tuple(-r for r in _rank(e)), e[0].device))
        device, code, meaning, action, severity, action_text, when, held = events[0]
        others = len({(e[0].device, e[1]) for e in events}) - 1
        also = f" and {others} more" if others else ""
        since = "held from before the window" if held else f"first reported in the period ending {when}"
        return self.finding(
            resource=node.id,
            summary=(f"GPU {device.device} of {node.label} reported Xid {code} ({meaning}), {since}{also}: "
                     f"{action_text}."),
            severity=severity,
            evidence={
                "instance": node.id,
                "action": action,
                "action_text": action_text,
                "catalogue": CATALOGUE_URL,
                "xids": [{"gpu": d.device, "xid": c, "meaning": m, "action": a, "severity": sev.value,
                          "first_period_end": w, "held_from_before_window": h}
                         for d, c, m, a, sev, _, w, h in events],
                "instance_type": node.instance_type,
                "hyperpod_cluster": node.group.removeprefix("hyperpod:") if node.hyperpod else None,
                "source": "prometheus",
                **where,
                **window_evidence(ctx, metrics),
            },
        )


def _events(device: DeviceMetrics) -> list[tuple[int, str, str, Severity, str, str, bool]]:
    """(xid, meaning, action, severity, what to do, when, held) per Xid the device reported: a change to a code
    inside the window, or a code held since before it that the catalogue judges critical (reset, reboot, replace:
    those stand until done)."""
    found = []
    points: list[Point] = list(device.signals.get(XID, ()))
    for i, (when, value) in enumerate(points):
        code = int(value)
        previous = int(points[i - 1][1]) if i else None
        if code == 0 or code == previous:
            continue
        verdict = xid_verdict(code)
        held = previous is None  # already set when the window began: when it happened is unknown
        if held and verdict.severity is not Severity.CRITICAL:
            continue
        found.append((code, _meaning(verdict), verdict.action, verdict.severity, verdict.action_text,
                      when.isoformat(timespec="seconds"), held))
    if any(v >= 1 for _, v in device.signals.get(ROW_REMAP_FAILURE, ())):
        when = next(t for t, v in device.signals[ROW_REMAP_FAILURE] if v >= 1)
        found.append((*ROW_REMAP, when.isoformat(timespec="seconds"), False))
    return found
