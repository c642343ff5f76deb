"""What fmdoctor reads from a scheduler: its nodes (state, reason, devices) and the jobs or pods on them.

One shape for Slurm and Kubernetes, so the checks and the ``jobs`` evidence do not care which one answered.
What could not be read is a gap (``SchedulerView.gaps``), never an empty list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SLURM = "slurm"
KUBERNETES = "kubernetes"


@dataclass(frozen=True)
class SchedulerJob:
    """A running Slurm job or a Kubernetes pod: the unit of work a node fault hits."""

    id: str
    name: str
    user: str  # Slurm's user, or the pod's owner (kind/name) for Kubernetes
    nodes: tuple[str, ...]  # scheduler node names, in the scheduler's order
    state: str
    elapsed_s: int | None = None
    namespace: str | None = None  # Kubernetes only
    requests: Mapping[str, str] = field(default_factory=dict)  # Kubernetes: extended resources requested

    def to_evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "user": self.user, "nodes": list(self.nodes),
                               "state": self.state, "elapsed_s": self.elapsed_s}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        return out


@dataclass(frozen=True)
class SchedulerNode:
    """One node as the scheduler sees it.

    ``states`` are upper-case words: Slurm's base state and flags (IDLE, ALLOCATED, MIXED, DOWN, DRAIN,
    INVALID_REG, NOT_RESPONDING...), or for Kubernetes READY/NOTREADY/UNKNOWN plus CORDONED and DISRUPTING (an
    autoscaler's or interruption handler's taint).
    """

    name: str
    states: frozenset[str]
    reason: str = ""
    reason_by: str = ""
    reason_since: int | None = None  # epoch seconds
    addresses: tuple[str, ...] = ()  # NodeAddr/NodeHostName, or the Kubernetes node's InternalIP/Hostname
    provider_id: str | None = None  # Kubernetes spec.providerID (aws:///zone/i-...)
    partitions: tuple[str, ...] = ()
    # Devices the node is configured (Slurm Gres) or reports (Kubernetes capacity/allocatable) to have.
    configured: Mapping[str, int] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    conditions: Mapping[str, str] = field(default_factory=dict)  # Kubernetes: type -> status
    taints: tuple[str, ...] = ()  # key=value:effect
    labels: Mapping[str, str] = field(default_factory=dict)

    def has(self, *states: str) -> bool:
        return any(s in self.states for s in states)

    def to_evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "states": sorted(self.states), "reason": self.reason}
        if self.reason_by:
            out["reason_by"] = self.reason_by
        if self.reason_since is not None:
            out["reason_since"] = self.reason_since
        return out


@dataclass(frozen=True)
class SchedulerView:
    """Everything read from one scheduler in one run."""

    kind: str  # SLURM or KUBERNETES
    source: str  # how: 'sinfo/squeue', 'slurmrestd http://...', 'kubernetes context X'
    nodes: tuple[SchedulerNode, ...] = ()
    jobs: tuple[SchedulerJob, ...] = ()
    pending: tuple[SchedulerJob, ...] = ()  # Kubernetes: pods not yet scheduled
    device_plugins: tuple[SchedulerJob, ...] = ()  # Kubernetes: the device-plugin pods (state: ready or not)
    version: str = ""
    gaps: tuple[str, ...] = ()  # what could not be read, and why

    def node(self, name: str) -> SchedulerNode | None:
        return next((n for n in self.nodes if n.name == name), None)

    def jobs_on(self, node: str) -> list[SchedulerJob]:
        return [j for j in self.jobs if node in j.nodes]


class SchedulerUnavailable(Exception):
    """The scheduler could not be read at all; ``grant`` says how to make it readable."""

    def __init__(self, message: str, grant: str, code: str = "SchedulerUnavailable"):
        super().__init__(message)
        self.message = message
        self.grant = grant
        self.code = code
