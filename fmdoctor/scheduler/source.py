"""Which scheduler a cluster runs, reading it once, and which instance each of its nodes is.

``scheduler.kind: auto`` (the default) decides from what the cluster shows: a HyperPod cluster's orchestrator
(``Slurm`` or ``Eks``), instance tags that ParallelCluster / AWS PCS (Slurm) or EKS (Kubernetes) put on their
nodes, ParallelCluster's log groups in ``training.log_groups``, and last a local ``sinfo``. Scheduler node names
become instances through the one node identity (:mod:`fmdoctor.engine.identity`): the scheduler's own address
for each node (Slurm's NodeAddr/NodeHostName, Kubernetes' providerID ``aws:///zone/i-...`` or InternalIP) is
added as an alias, never matched here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fmdoctor.config import SchedulerSettings
from fmdoctor.engine.identity import K8S_NODE, SLURM_NODE, NodeIdentities
from fmdoctor.engine.inventory import Inventory
from fmdoctor.scheduler import slurm
from fmdoctor.scheduler.model import KUBERNETES, SLURM, SchedulerNode, SchedulerUnavailable, SchedulerView

NONE = "none"
SLURM_TAG_PREFIXES = ("parallelcluster:", "aws:pcs:")
K8S_TAG_PREFIXES = ("eks:cluster-name", "eks:nodegroup-name", "kubernetes.io/cluster/", "karpenter.sh/")
SLURM_LOG_GROUPS = ("/aws/parallelcluster/", "/aws/sagemaker/Clusters/")  # HyperPod-Slurm logs there too


def detect_kinds(settings: SchedulerSettings, inventory: Inventory, log_groups: tuple[str, ...] = (),
                 local_sinfo: Callable[[], bool] = slurm.local_available) -> tuple[tuple[str, ...], str]:
    """(kinds, why): the configured kind, or for ``auto`` what the cluster shows, Slurm and Kubernetes both
    where both show (Slurm training nodes and EKS inference nodes under one cluster tag); () when none does."""
    if settings.kind != "auto":
        return ((), "scheduler.kind is none") if settings.kind == NONE else ((settings.kind,), "scheduler.kind")
    found: dict[str, str] = {}
    hyperpod = inventory.hyperpod
    if hyperpod is not None and hyperpod.orchestrator in ("Slurm", "Eks"):
        kind = SLURM if hyperpod.orchestrator == "Slurm" else KUBERNETES
        found[kind] = f"HyperPod cluster {hyperpod.name} is orchestrated by {hyperpod.orchestrator}"
    for instance in inventory.instances:
        for key in instance.tags:
            if key.startswith(SLURM_TAG_PREFIXES):
                found.setdefault(SLURM, f"{instance.id} carries the tag {key}")
            elif key.startswith(K8S_TAG_PREFIXES):
                found.setdefault(KUBERNETES, f"{instance.id} carries the tag {key}")
    for group in log_groups:
        if group.startswith(SLURM_LOG_GROUPS):
            found.setdefault(SLURM, f"its log group {group}")
    if settings.slurm.via == "slurmrestd":
        found.setdefault(SLURM, "scheduler.slurm names a slurmrestd")
    if settings.kubernetes.context or settings.kubernetes.kubeconfig:
        found.setdefault(KUBERNETES, "scheduler.kubernetes names a kubeconfig")
    if SLURM not in found and local_sinfo():
        found[SLURM] = "sinfo is on this machine's PATH with a slurm.conf"
    if not found:
        return (), ("no scheduler found: no HyperPod orchestrator, Slurm/EKS tags, ParallelCluster log group, "
                    "scheduler section or local sinfo")
    kinds = tuple(k for k in (SLURM, KUBERNETES) if k in found)
    return kinds, "; ".join(f"{k}: {found[k]}" for k in kinds)


def read_view(kind: str, settings: SchedulerSettings) -> SchedulerView:
    """Read the scheduler; raises :class:`SchedulerUnavailable` (with how to grant access) when it cannot."""
    if kind == SLURM:
        if settings.slurm.via == "slurmrestd":
            assert settings.slurm.url is not None  # the config requires it with via: slurmrestd
            token = slurm.token_from_env(settings.slurm.token_env)
            return slurm.RestSlurm(settings.slurm.url, token, settings.slurm.user).read()
        return slurm.read_local()
    if kind == KUBERNETES:
        from fmdoctor.scheduler import kubernetes

        api = kubernetes.api_client(settings.kubernetes.context, settings.kubernetes.kubeconfig)
        where = f"kubernetes context {settings.kubernetes.context or '(current)'}"
        return kubernetes.read(api, where)
    raise SchedulerUnavailable(f"unknown scheduler kind {kind!r}", "set scheduler.kind to slurm or kubernetes")


def aliases_of(view: SchedulerView) -> dict[str, str]:
    """Scheduler node name -> the name the scheduler itself gives for where it runs (instance id or address)."""
    from fmdoctor.scheduler.kubernetes import instance_of_provider_id

    out: dict[str, str] = {}
    for node in view.nodes:
        target = instance_of_provider_id(node.provider_id) or next(iter(node.addresses), None)
        if target and target != node.name:
            out[node.name] = target
    return out


@dataclass(frozen=True)
class SchedulerMap:
    """A scheduler's view with each of its nodes tied to an instance (where the one identity can tell)."""

    view: SchedulerView
    identities: NodeIdentities
    instance_of: Mapping[str, str] = field(default_factory=dict)  # scheduler node name -> instance id
    unmapped: tuple[str, ...] = ()  # scheduler nodes no instance of the cluster matched

    def nodes_of(self, instance_id: str) -> list[SchedulerNode]:
        return [n for n in self.view.nodes if self.instance_of.get(n.name) == instance_id]

    def node_for(self, name: str) -> SchedulerNode | None:
        """The scheduler node ``name`` (an instance id, a DNS name, an IP, a scheduler name) stands for."""
        match = self.identities.resolve(name)
        if match.instance is None:
            return self.view.node(name)
        nodes = self.nodes_of(match.instance.id)
        return nodes[0] if nodes else None


def map_view(view: SchedulerView, inventory: Inventory, hostname_tags: tuple[str, ...] = ()) -> SchedulerMap:
    via = SLURM_NODE if view.kind == SLURM else K8S_NODE
    identities = NodeIdentities.of(inventory, hostname_tags)
    aliases = aliases_of(view)
    if aliases:
        identities = identities.with_aliases(aliases, via)
    instance_of: dict[str, str] = {}
    unmapped = []
    for node in view.nodes:
        match = identities.resolve(node.name)
        # where the scheduler says the node runs (its address, providerID) names one instance and its name
        # another: either may be the node, so neither is (a drain must never pick one)
        where = identities.resolve(aliases[node.name]) if node.name in aliases else None
        disagree = where is not None and where.instance is not None and match.instance is not None \
            and where.instance.id != match.instance.id
        if match.instance is not None and not disagree:
            instance_of[node.name] = match.instance.id
        else:
            unmapped.append(node.name)
    return SchedulerMap(view, identities, instance_of, tuple(unmapped))


def elapsed_text(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) if seconds < 86400 else \
        f"{seconds // 86400}-{time.strftime('%H:%M:%S', time.gmtime(seconds % 86400))}"
