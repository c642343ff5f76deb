"""Which cluster an event is about, and which checks explain it.

The first ``serve.routes`` rule whose globs all match decides (it may name the cluster, the checks, or say
ignore). Otherwise the cluster is found from the event itself, in this order: the Alertmanager label
``serve.cluster_label``; a tag or label with one of the cluster's tag keys (alarm tags, endpoint tags); the
HyperPod cluster (a cluster's ``hyperpod.cluster_name``, or its own name); the endpoint (a cluster's
``inference.endpoints``); the instances' own tags, looked up in EC2; the node an alert's labels name (DCGM's
``Hostname``, Prometheus's ``instance``), resolved by :mod:`fmdoctor.engine.identity` in each configured
cluster. Only clusters configured in ``fmdoctor.yaml`` are investigated: a name taken from an event is never
enough to start AWS calls.

Default checks by kind follow what can explain the event: a GPU metric alarm runs the GPU checks, an EFA
metric the EFA checks, a SageMaker endpoint alarm or status change the inference checks, a HyperPod node
event the HyperPod, GPU and EFA checks, a Spot notice the Spot checks, a Capacity Block warning the capacity
and checkpoint checks (is there a fresh checkpoint to resume from?). Anything else runs every check.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fmdoctor.config import ServeRoute, Settings
from fmdoctor.serve import events as ev
from fmdoctor.serve.events import Event

log = logging.getLogger(__name__)

# (kind, ids) -> cluster names whose tag keys the instances carry; kind is 'instance' or 'capacity-reservation',
# or 'node' for names an alert's labels give a node (the clusters whose identity resolver knows the node).
InstanceLookup = Callable[[str, Sequence[str]], set[str]]

DEFAULT_CHECKS: dict[str, tuple[str, ...] | None] = {
    ev.SPOT_INTERRUPTION: ("spot",),
    ev.SPOT_REBALANCE: ("spot",),
    ev.CAPACITY_BLOCK: ("capacity", "checkpoint"),
    ev.HYPERPOD_NODE: ("hyperpod", "gpu", "efa"),
    ev.HYPERPOD_CLUSTER: ("hyperpod", "gpu", "efa"),
    ev.HYPERPOD_EVENT: ("hyperpod", "gpu", "efa"),
    ev.ENDPOINT: ("inference",),
    ev.HEALTH: ("gpu", "efa", "hyperpod"),
}
_TOPIC_CHECKS = (  # words in a metric, namespace or alert name -> the family that explains it
    (("efa", "rdma", "nccl"), ("efa",)),
    (("gpu", "nvidia", "dcgm", "xid", "neuron"), ("gpu",)),
    (("endpoint", "invocation", "modellatency", "inference", "vllm", "tgi"), ("inference",)),
    (("checkpoint",), ("checkpoint",)),
    (("spot",), ("spot",)),
)


@dataclass(frozen=True)
class Route:
    cluster: str | None  # None: not a configured cluster (acknowledged as unknown_cluster)
    checks: tuple[str, ...] | None  # ids or families; None: every cluster check
    reason: str  # how the cluster was found, for the log line
    ignore: bool = False


class Router:
    def __init__(self, settings: Settings, lookup: InstanceLookup | None = None):
        self.settings = settings
        self.rules: list[ServeRoute] = list(settings.serve.routes)
        self.lookup = lookup

    def route(self, event: Event) -> Route:
        rule = next((r for r in self.rules if _matches(r, event)), None)
        if rule is not None and rule.ignore:
            return Route(None, None, "ignored by a serve.routes rule", ignore=True)
        checks = tuple(rule.checks) if rule is not None and rule.checks else default_checks(event)
        if rule is not None and rule.cluster:
            return self._known(rule.cluster, checks, "a serve.routes rule")
        cluster, reason = self._find(event)
        if cluster is None:
            return Route(None, checks, reason)
        return self._known(cluster, checks, reason)

    def _known(self, cluster: str, checks: tuple[str, ...] | None, reason: str) -> Route:
        if cluster not in self.settings.clusters:
            return Route(None, checks, f"{reason} names cluster {cluster!r}, which fmdoctor.yaml does not configure")
        return Route(cluster, checks, reason)

    def _find(self, event: Event) -> tuple[str | None, str]:
        clusters = self.settings.clusters
        label = event.labels.get(self.settings.serve.cluster_label)
        if label:
            return label, f"label {self.settings.serve.cluster_label}"
        for name in clusters:
            for key in self.settings.cluster(name).tag_keys:
                if event.labels.get(key):
                    return event.labels[key], f"tag {key}"
        if event.hyperpod_cluster:
            for name in clusters:
                if event.hyperpod_cluster in (self.settings.cluster(name).hyperpod.cluster_name, name):
                    return name, f"HyperPod cluster {event.hyperpod_cluster}"
        if event.endpoint:
            for name in clusters:
                if event.endpoint in self.settings.cluster(name).inference.endpoints:
                    return name, f"endpoint {event.endpoint}"
        for kind, ids in (("instance", list(event.instances)),
                          ("capacity-reservation", [event.capacity_reservation] if event.capacity_reservation else []),
                          ("node", list(event.nodes))):  # DCGM's Hostname, instance: the node's cluster
            if ids and self.lookup is not None:
                try:
                    found = sorted(self.lookup(kind, ids))
                except Exception as exc:  # AWS unreachable or denied: say so, the event is not lost silently
                    return None, f"could not look up the tags of {kind} {', '.join(ids)} ({type(exc).__name__})"
                if len(found) == 1:
                    return found[0], f"tags of {kind} {', '.join(ids)}"
                if found:
                    return None, f"{kind} {', '.join(ids)} carry tags of several clusters: {', '.join(found)}"
        return None, ("no configured cluster matches the event (labels, tags, HyperPod cluster, endpoint, instances, "
                      "node names)")


def default_checks(event: Event) -> tuple[str, ...] | None:
    if event.kind in DEFAULT_CHECKS:
        return DEFAULT_CHECKS[event.kind]
    explicit = event.labels.get("fmdoctor_checks")  # an Alertmanager rule may say which checks explain it
    if explicit:
        return tuple(c.strip() for c in explicit.split(",") if c.strip()) or None
    if event.endpoint:  # a SageMaker endpoint metric (its GPUUtilization too) is the endpoint's business
        return ("inference",)
    words = " ".join(v or "" for v in (event.namespace, event.metric, event.alarm, event.labels.get("alertname"))
                     ).lower().replace("_", "")
    chosen = [family for keys, families in _TOPIC_CHECKS if any(k in words for k in keys) for family in families]
    return tuple(dict.fromkeys(chosen)) or None


def _matches(rule: ServeRoute, event: Event) -> bool:
    for name, pattern in rule.match.items():
        value = event.field_value(name)
        if value is None or not fnmatch.fnmatchcase(value, pattern):
            return False
    return True
