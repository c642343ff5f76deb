from __future__ import annotations

from fmdoctor.engine.check import EFA_METRICS, Check, NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.metrics.cluster import ClusterMetrics, EfaCounters
from fmdoctor.metrics.source import unseen_reason

from ._common import id_list, plural
from ._gpu import (
    IAM_ACTIONS,
    INVENTORY,
    PREFETCH,
    accelerated_running,
    cluster_metrics,
    efa_interfaces,
    report_unseen,
    settled,
    window_evidence,
)
from ._gpu_sources import metric_sources, metric_targets

READABLE = {
    "efa_retrans_timeout_events": "retransmit timeouts",
    "efa_impaired_remote_conn_events": "impaired remote connections",
    "efa_unresponsive_remote_events": "unresponsive-peer events",
    "efa_rx_dropped": "dropped received packets",
    "rx_drops": "dropped received packets",  # the EFA exporter's node_amazonefa_* counters
    "rdma_read_wr_err": "failed RDMA read work requests",
    "rdma_write_wr_err": "failed RDMA write work requests",
}


class EfaErrors(Check):
    """No EFA interface's error counters rose during the window: the CloudWatch agent's retransmit timeouts,
    impaired and unresponsive remote connections and received packets dropped (CloudWatch agent EFA metrics),
    or the EFA exporter's dropped packets and failed RDMA read/write work requests (node_amazonefa_rx_drops,
    _rdma_read_wr_err, _rdma_write_wr_err in Prometheus, from aws-samples/awsome-distributed-training
    4.validation_and_observability/3.efa-node-exporter, as the SageMaker HyperPod observability add-on ships it).

    These count a sick link, a sick peer or a congested path that no configuration check can see; the job
    slows down first and NCCL aborts later. Timeouts and unresponsive peers are critical, the others warnings:
    a failed work request also follows a peer process that died, so on its own it does not prove the link.
    """

    id = "efa-errors"
    family = "efa"
    concerns = frozenset({NODE})
    severity = Severity.WARNING
    iam_actions = IAM_ACTIONS
    prefetch = PREFETCH
    inventory = INVENTORY
    metrics = frozenset({EFA_METRICS})

    def run(self, ctx: CheckContext) -> list[Finding]:
        gpu = ctx.settings.gpu
        inv = ctx.inventory
        hyperpod = [n for n in accelerated_running(ctx) if n.efa and n.hyperpod]
        with_efa = sorted(set(efa_interfaces(ctx).values()))
        if not with_efa and not hyperpod:
            raise NotApplicable("no running compute node has EFA interfaces")
        if not with_efa and metric_sources(ctx).prometheus is None:
            # Only HyperPod nodes: CloudWatch cannot hold their counters (their interfaces are not this account's).
            why = unseen_reason(metric_sources(ctx))
            ctx.unverified(f"EFA error counters of {plural(len(hyperpod), 'node')} no metric source sees "
                           f"({id_list([n.label for n in hyperpod])})", code="NoMetricSource", message=why)
            raise Unverified(why)
        metrics = cluster_metrics(ctx)
        instances = [i for i in (inv.instance(n) for n in with_efa) if i is not None and settled(ctx, i)]
        starting: dict[str, list[str]] = {}
        for instance in instances:
            if instance.id in metrics.efa_starting:
                starting.setdefault(metrics.efa_starting[instance.id], []).append(inv.label(instance.id))
        for why, labels in starting.items():
            ctx.unverified(f"EFA error counters of {plural(len(labels), 'node')} ({id_list(labels)})",
                           code="MetricSourceStarting", message=why)
        instances = [i for i in instances if i.id not in metrics.efa_starting]
        seen = report_unseen(ctx, "EFA error counters", metrics, [n for n in hyperpod if settled(ctx, n)],
                             require_one=not instances, efa=True)
        if starting and not instances and not seen:
            raise Unverified(next(iter(starting)))
        by_node: dict[str, list[EfaCounters]] = {}
        for counters in metrics.efa.values():
            by_node.setdefault(counters.instance_id, []).append(counters)
        silent = ([inv.label(i.id) for i in instances if i.id not in by_node]
                  + [n.label for n in seen if n.id not in by_node])
        where = f"{gpu.efa_namespace}/{gpu.efa_metrics[0]}" + (
            f" or node_amazonefa_* in {metrics.prometheus}" if metrics.prometheus else "")
        strangers = sorted({name for label, names in metrics.unmatched.items() if "amazonefa" in label
                            for name in names})
        if silent and not by_node:
            found = (f"; EFA exporter series were found but name no node ({', '.join(strangers[:3])}): have the "
                     "scraper label them with the node's instance id or host" if strangers else "")
            ctx.unverified(
                f"EFA error counters of {plural(len(silent), 'node')} ({id_list(silent)})", code="NoMetrics",
                message=f"no node publishes EFA counters ({where}): configure the CloudWatch agent's 'efa' metrics, "
                        f"or the EFA exporter and metrics.url{found}",
            )
            raise Unverified("no EFA counters were found for any node")
        if silent:
            ctx.unverified(
                f"EFA error counters of {plural(len(silent), 'node')} that publish none ({id_list(silent)})",
                code="NoMetrics", message=f"other nodes publish {where}",
            )
        errors = set(gpu.efa_metrics) | set(metrics.efa_counters)
        findings = []
        for instance_id, interfaces in sorted(by_node.items()):
            rising = [c for c in interfaces if any(v >= gpu.efa_min_events for k, v in c.totals.items() if k in errors)]
            if rising:
                findings.append(self._finding(ctx, instance_id, interfaces, rising, metrics, errors))
        return findings

    def _finding(self, ctx: CheckContext, instance_id: str, interfaces: list[EfaCounters],
                 rising: list[EfaCounters], metrics: ClusterMetrics, errors: set[str]) -> Finding:
        gpu = ctx.settings.gpu
        totals: dict[str, float] = {}
        throughput: dict[str, float] = {}
        for c in rising:
            for name, value in c.totals.items():
                into = totals if name in errors else throughput
                into[name] = into.get(name, 0.0) + value
        totals = {k: v for k, v in sorted(totals.items(), key=lambda kv: -kv[1]) if v >= gpu.efa_min_events}
        critical = [name for name in totals if name in gpu.efa_critical_metrics]
        rising.sort(key=lambda c: -sum(v for k, v in c.totals.items() if k in errors))
        cards = {eni.id: eni.network_card_index for eni in ctx.inventory.interfaces.values()
                 if eni.instance_id == instance_id}
        # Whole events: Prometheus's increase() extrapolates a counter to the edges of each period (36.29 for 30).
        counts = ", ".join(f"{v:.0f} {READABLE.get(name, name)}" for name, v in totals.items())
        first = f"EFA interface {rising[0].eni_id}" if rising[0].eni_id else f"EFA device {rising[0].device}"
        where = first if len(rising) == 1 else f"{len(rising)} of its {len(interfaces)} EFA interfaces"
        node = next((n for n in metric_targets(ctx).nodes if n.id == instance_id), None)
        label = node.label if node is not None else ctx.inventory.label(instance_id)
        prometheus = metric_sources(ctx).prometheus
        # Where the operator re-runs the query: the Prometheus API (and its auth) of a counter read there.
        source = ({"prometheus_url": prometheus.url, "prometheus_auth": prometheus.auth}
                  if prometheus is not None and not rising[0].eni_id else {})
        return self.finding(
            resource=instance_id,
            summary=(
                f"{label} counted {counts} on {where} in the last "
                f"{window_evidence(ctx, metrics)['window']}: a failing link or peer; drain the node if it "
                "keeps rising."
            ),
            severity=Severity.CRITICAL if critical else Severity.WARNING,
            evidence={
                "instance": instance_id,
                "interfaces": [
                    {"eni": c.eni_id, "device": c.device, "network_card": cards.get(c.eni_id or ""),
                     "counters": {k: v for k, v in c.totals.items() if v}}
                    for c in rising
                ],
                "totals": totals,
                "critical_counters": critical,
                "interfaces_publishing": len(interfaces),
                "min_events": gpu.efa_min_events,
                "namespace": gpu.efa_namespace if rising[0].eni_id else "prometheus",
                "source": "cloudwatch" if rising[0].eni_id else "prometheus",
                **source,
                "hyperpod_cluster": node.group.removeprefix("hyperpod:") if node and node.hyperpod else None,
                "rdma_throughput_bytes": {k: v for k, v in throughput.items() if v},
                **window_evidence(ctx, metrics),
            },
        )
