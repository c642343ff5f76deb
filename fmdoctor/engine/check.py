"""The contract every check fulfils.

A check is a small stateless class: a stable ``id``, a docstring whose first paragraph says what it
proves, the IAM actions it needs (they feed ``fmdoctor iam-policy`` and error messages), and a pure
``run(ctx)`` over the injected clients and the shared inventory. It returns findings; it never prints,
exits or builds its own clients. ``raise NotApplicable(reason)`` when the target has nothing to check.
"""

from __future__ import annotations

import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from fmdoctor.engine.entities import KINDS
from fmdoctor.engine.inventory import INSTANCES, INVENTORY_PARTS
from fmdoctor.engine.model import Finding, Severity

if TYPE_CHECKING:
    from fmdoctor.engine.context import CheckContext
    from fmdoctor.engine.prefetch import EarlyLoad

# The families of the run's shared metric snapshot a check may read (Check.metrics): GPU/Neuron series, and
# EFA error counters.
ACCELERATOR_METRICS = "accelerators"
EFA_METRICS = "efa"
METRIC_FAMILIES = frozenset({ACCELERATOR_METRICS, EFA_METRICS})

CHECK_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
IAM_ACTION = re.compile(r"^[a-z0-9-]+:[A-Z][A-Za-z0-9]+$")


class NotApplicable(Exception):
    """The target has nothing this check looks at (no EFA interfaces, no checkpoint configured...)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Unverified(Exception):
    """Every source the check reads failed, and the failures are already recorded on the context
    (``ctx.unverified``, ``Gaps.report``): the check did not run, so it must not count as one that did
    (a run where nothing was verified is 'unknown', never 'warning' or 'ok')."""


class Check(ABC):
    id: ClassVar[str]
    family: ClassVar[str]
    severity: ClassVar[Severity]
    iam_actions: ClassVar[tuple[str, ...]]
    runbook: ClassVar[str] = ""  # defaults to the check id
    # Where it runs: "cluster" (against AWS, for a whole cluster) and/or "node" (on the node itself, with
    # fmdoctor check --local). A check with both uses what the mode offers (e.g. Spot notices from
    # EC2/SQS for a cluster, from IMDS on a node).
    targets: ClassVar[frozenset[str]] = frozenset({"cluster"})
    # The inventory parts it reads (fmdoctor.engine.inventory: "instances", "endpoints", "hyperpod"); a run
    # discovers only what its checks name, so `--only efa` makes no SageMaker call.
    inventory: ClassVar[frozenset[str]] = frozenset({INSTANCES})
    # The families of the shared metric snapshot it reads (METRIC_FAMILIES); the snapshot asks for the series
    # of those its run's checks name, so `--only efa` lists and fetches no GPU series.
    metrics: ClassVar[frozenset[str]] = frozenset()
    # What a question may name that its findings can be about, on it or through it (fmdoctor.engine.entities
    # KINDS: "node", "endpoint", "security-group", "bucket", "file-system", "job", "instance-group"); a question
    # about one such thing runs every check that concerns its kind.
    concerns: ClassVar[frozenset[str]] = frozenset()
    # The loads it reads that need nothing from the inventory (fmdoctor.engine.prefetch): a run starts those of
    # its checks before it reads the inventory, and the check reads them with EarlyLoad.get.
    prefetch: ClassVar[tuple[EarlyLoad[Any], ...]] = ()

    @abstractmethod
    def run(self, ctx: CheckContext) -> list[Finding]:
        """Inspect the target and return what is wrong; an empty list means verified healthy."""

    @classmethod
    def runbook_id(cls) -> str:
        return cls.runbook or cls.id

    @classmethod
    def proves(cls) -> str:
        """First paragraph of the docstring, on one line: what a passing run of this check proves."""
        doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")  # the check's own, never inherited
        return " ".join(doc.split("\n\n", 1)[0].split())

    def finding(
        self,
        resource: str,
        summary: str,
        evidence: dict[str, Any],
        severity: Severity | None = None,
    ) -> Finding:
        return Finding(
            check=self.id,
            severity=severity or self.severity,
            resource=resource,
            summary=summary,
            evidence=evidence,
            runbook=self.runbook_id(),
        )


def validate_check_class(cls: type[Check]) -> list[str]:
    """Problems with a check's declaration; the registry refuses to load a check that has any."""
    problems = []
    for attr in ("id", "family", "severity", "iam_actions"):
        if not hasattr(cls, attr):
            problems.append(f"{cls.__name__} lacks '{attr}'")
    if problems:
        return problems
    if not CHECK_ID.match(cls.id):
        problems.append(f"{cls.__name__}: id {cls.id!r} is not kebab-case")
    if not cls.proves():
        problems.append(f"{cls.id}: no docstring saying what it proves")
    if not cls.targets or not set(cls.targets) <= {"cluster", "node"}:
        problems.append(f"{cls.id}: targets must be a non-empty subset of {{'cluster', 'node'}}")
    if not set(cls.inventory) <= INVENTORY_PARTS:
        problems.append(f"{cls.id}: inventory parts must be a subset of {sorted(INVENTORY_PARTS)}")
    if not set(cls.metrics) <= METRIC_FAMILIES:
        problems.append(f"{cls.id}: metrics must be a subset of {sorted(METRIC_FAMILIES)}")
    if not set(cls.concerns) <= KINDS:
        problems.append(f"{cls.id}: concerns must be a subset of {sorted(KINDS)}")
    if not isinstance(cls.severity, Severity):
        problems.append(f"{cls.id}: severity must be a Severity")
    for action in cls.iam_actions:
        if not IAM_ACTION.match(action):
            problems.append(f"{cls.id}: {action!r} is not an IAM action like 'ec2:DescribeInstances'")
    for load in cls.prefetch:  # what its run calls before the inventory is in its policy (iam-policy --only)
        missing = sorted(set(load.iam_actions) - set(cls.iam_actions))
        if missing:
            problems.append(f"{cls.id}: prefetch {load.name} calls {', '.join(missing)}, not in its iam_actions")
    return problems


def inventory_parts(checks: Iterable[Check]) -> frozenset[str]:
    """What discovery must fetch for these checks."""
    return frozenset(part for check in checks for part in check.inventory)


def metric_families(checks: Iterable[Check]) -> frozenset[str]:
    """The metric families these checks read (see Check.metrics)."""
    return frozenset(family for check in checks for family in check.metrics)
