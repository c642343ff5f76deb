"""Loads that need nothing from the inventory, declared once by the checks that read them and started with the run.

A run reads its inventory first (DescribeInstances and the describes after it, the SageMaker endpoint chain),
and its checks' own loads came after, so their chains added to the inventory's: DescribePlacementGroups,
DescribeCluster and ListClusterNodes, the checkpoint listings, the Spot queue waited for instance details they
never read. An :class:`EarlyLoad` names one such load: its key and its loader, which takes only a
:class:`~fmdoctor.engine.context.RunStart` (settings, clients, clock, the shared memo) and a subject (a cluster
name, a log-group prefix; "" for a load of the whole account and region). A check lists the loads it reads in
``Check.prefetch`` and reads them with :meth:`EarlyLoad.get`; ``Doctor.check`` starts the selected checks'
loads (:func:`start_prefetches`) before it reads the inventory. The value a check reads is the prefetched one,
since both come from the one key and loader; a failure is memoised like any shared load and reported by each
check that reads it. ``iam_actions`` are what the loader calls: a check declaring the load declares them too
(the registry refuses one that does not), so ``fmdoctor iam-policy --only`` covers its prefetches.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from fmdoctor.engine.check import Check
    from fmdoctor.engine.context import CheckContext, RunStart

T = TypeVar("T")


def _whole(start: RunStart) -> Iterable[str]:
    return ("",)


@dataclass(frozen=True, eq=False)
class EarlyLoad(Generic[T]):
    """One inventory-free load: ``load(start, subject)`` under the key ``name:subject``. ``subjects(start)`` says
    which subjects a run starts early (those its settings name; none when there is nothing to load).
    ``regional``: the answer depends on the account, the region and the subject only (never on the run's
    settings or clock), so runs given the same :class:`RegionLoads` share it."""

    name: str
    load: Callable[[RunStart, str], T]
    iam_actions: tuple[str, ...]
    subjects: Callable[[RunStart], Iterable[str]] = _whole
    regional: bool = False

    def key(self, subject: str = "") -> str:
        return f"{self.name}:{subject}" if subject else self.name

    def _where(self, start: RunStart) -> RunStart:
        """The start a load runs from: the run's own, or for a regional load given RegionLoads, the region's
        session and memo (so the loads it reads in turn are the region's too)."""
        region = start.region_loads
        if not self.regional or region is None or start.shared is region.shared:
            return start
        return dataclasses.replace(start, aws=region.aws, shared=region.shared)

    def read(self, start: RunStart, subject: str = "") -> T:
        """The value (started now unless a prefetch or another reader started it), from any thread."""
        where = self._where(start)
        return where.shared.get(self.key(subject), functools.partial(self.load, where, subject))

    def get(self, ctx: CheckContext, subject: str = "") -> T:
        """What a check reads: the same value as :meth:`read`, its failure raised to each reader."""
        return self.read(ctx.scope.start, subject)

    def with_subjects(self, subjects: Callable[[RunStart], Iterable[str]]) -> EarlyLoad[T]:
        """The same load (one key, one loader) started early for other subjects (a check that reads it for the
        cluster's own name as well as the configured one)."""
        return dataclasses.replace(self, subjects=subjects)

    def begin(self, start: RunStart) -> None:
        """Start the loads of every subject the settings name, each in a thread of its own."""
        where = self._where(start)
        for subject in dict.fromkeys(self.subjects(start)):
            where.shared.start(self.key(subject), functools.partial(self.load, where, subject))


def prefetches(checks: Iterable[Check]) -> list[EarlyLoad[Any]]:
    """The distinct loads these checks declare, in declaration order."""
    found: dict[int, EarlyLoad[Any]] = {}
    for check in checks:
        for load in check.prefetch:
            found.setdefault(id(load), load)
    return list(found.values())  # the same load for other subjects is listed again: starting a key twice is a no-op


def start_prefetches(start: RunStart, checks: Iterable[Check]) -> None:
    """Begin every load the selected checks declare (nothing for a run without AWS: it reads as it goes)."""
    if start.aws is None:
        return
    for load in prefetches(checks):
        load.begin(start)
