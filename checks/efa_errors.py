from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import ClusterMetrics, EfaCounters

from ._common import id_list, plural
from ._gpu import IAM_ACTIONS, cluster_metrics, efa_interfaces, settled, window_evidence

READABLE = {
    "efa_retrans_timeout_events": "retransmit timeouts",
    "efa_impaired_remote_conn_events": "impaired remote connections",
    "efa_unresponsive_remote_events": "unresponsive-peer events",
    "efa_rx_dropped": "dropped received packets",
}


class EfaErrors(Check):
    """No EFA interface's error counters (the CloudWatch agent's retransmit timeouts, impaired and
    unresponsive remote connections, received packets dropped) rose during the window.

    These count a sick link, a sick peer or a congested path that no configuration check can see; the job
    slows down first and NCCL aborts later. Timeouts and unresponsive peers are critical, the others warnings.
    """

    id = "efa-errors"
    family = "efa"
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS

    def run(self, ctx: CheckContext) -> list[Finding]:
        gpu = ctx.settings.gpu
        inv = ctx.inventory
        running = [i for i in inv.compute_nodes() if i.state == "running"]
        if not efa_interfaces(ctx):
            raise NotApplicable("no running compute node has EFA interfaces")
        metrics = cluster_metrics(ctx)
        if not metrics.efa:
            raise NotApplicable(
                f"none of the cluster's {len(metrics.efa_interfaces)} EFA interfaces publish EFA counters to "
                f"{gpu.efa_namespace} (the CloudWatch agent's 'efa' metrics are not configured)"
            )
        by_node: dict[str, list[EfaCounters]] = {}
        for counters in metrics.efa.values():
            by_node.setdefault(counters.instance_id, []).append(counters)
        silent = [inv.label(i.id) for i in running
                  if settled(ctx, i) and i.id in set(metrics.efa_interfaces.values()) and i.id not in by_node]
        if silent:
            ctx.unverified(
                f"EFA error counters of {plural(len(silent), 'node')} that publish none ({id_list(silent)})",
                code="NoMetrics", message=f"other nodes publish {gpu.efa_namespace}/{gpu.efa_metrics[0]}",
            )
        findings = []
        for instance_id, interfaces in sorted(by_node.items()):
            rising = [c for c in interfaces if any(v >= gpu.efa_min_events for v in c.totals.values())]
            if rising:
                findings.append(self._finding(ctx, instance_id, interfaces, rising, metrics))
        return findings

    def _finding(self, ctx: CheckContext, instance_id: str, interfaces: list[EfaCounters],
                 rising: list[EfaCounters], metrics: ClusterMetrics) -> Finding:
        gpu = ctx.settings.gpu
        totals: dict[str, float] = {}
        for c in rising:
            for name, value in c.totals.items():
                totals[name] = totals.get(name, 0.0) + value
        totals = {k: v for k, v in sorted(totals.items(), key=lambda kv: -kv[1]) if v >= gpu.efa_min_events}
        critical = [name for name in totals if name in gpu.efa_critical_metrics]
        rising.sort(key=lambda c: -sum(c.totals.values()))
        cards = {eni.id: eni.network_card_index for eni in ctx.inventory.interfaces.values()
                 if eni.instance_id == instance_id}
        counts = ", ".join(f"{v:g} {READABLE.get(name, name)}" for name, v in totals.items())
        where = (f"EFA interface {rising[0].eni_id}" if len(rising) == 1
                 else f"{len(rising)} of its {len(interfaces)} EFA interfaces")
        return self.finding(
            resource=instance_id,
            summary=(
                f"{ctx.inventory.label(instance_id)} counted {counts} on {where} in the last "
                f"{window_evidence(ctx, metrics)['window']}: a failing link or peer; drain the node if it "
                "keeps rising."
            ),
            severity=Severity.CRITICAL if critical else Severity.WARNING,
            evidence={
                "instance": instance_id,
                "interfaces": [
                    {"eni": c.eni_id, "device": c.device, "network_card": cards.get(c.eni_id),
                     "counters": {k: v for k, v in c.totals.items() if v}}
                    for c in rising
                ],
                "totals": totals,
                "critical_counters": critical,
                "interfaces_publishing": len(interfaces),
                "min_events": gpu.efa_min_events,
                "namespace": gpu.efa_namespace,
                **window_evidence(ctx, metrics),
            },
        )
