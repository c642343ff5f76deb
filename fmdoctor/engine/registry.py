"""The one catalogue of checks. Every front end selects checks here, by id or family."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from fmdoctor.engine.check import Check, validate_check_class
from fmdoctor.engine.errors import UsageError
from fmdoctor.engine.model import Finding
from fmdoctor.words import suggest

# Called after a run's checks with the run's scope and all its findings, to add evidence that spans checks
# (the scheduler's jobs on a node); an annotator never adds or removes findings.
Annotator = Callable[[Any, Sequence[Finding]], None]
# Called when a run starts, before its inventory is read, with its RunStart (fmdoctor.engine.context), to begin the
# loads that need no inventory (CloudWatch's metric listings) while it is read.
Starter = Callable[[Any], None]


class Registry:
    def __init__(self, check_classes: Iterable[type[Check]], annotators: Sequence[Annotator] = (),
                 starters: Sequence[Starter] = ()):
        self.annotators: tuple[Annotator, ...] = tuple(annotators)
        self.starters: tuple[Starter, ...] = tuple(starters)
        self._checks: dict[str, Check] = {}
        problems: list[str] = []
        for cls in check_classes:
            problems.extend(validate_check_class(cls))
            if getattr(cls, "id", None) in self._checks:
                problems.append(f"duplicate check id {cls.id!r}")
            elif hasattr(cls, "id"):
                self._checks[cls.id] = cls()
        if problems:
            raise ValueError("invalid check registry: " + "; ".join(problems))

    def start(self, run: Any) -> None:
        """Begin the loads of a run that need no inventory (``run``: its RunStart)."""
        for starter in self.starters:
            starter(run)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._checks.values())

    def __len__(self) -> int:
        return len(self._checks)

    def ids(self) -> list[str]:
        return list(self._checks)

    def families(self) -> list[str]:
        return list(dict.fromkeys(c.family for c in self._checks.values()))

    def get(self, check_id: str) -> Check:
        """One check by id (a family name is not one: the message lists the family's checks)."""
        try:
            return self._checks[check_id]
        except KeyError:
            members = [c.id for c in self._checks.values() if c.family == check_id]
            if members:
                raise UsageError(f"{check_id!r} is a family of checks, not one check id",
                                 hint=f"name one of {', '.join(members)}") from None
            close = suggest(check_id, self.ids())
            hint = f"; did you mean {', '.join(close)}?" if close else "; see 'fmdoctor checks list'"
            raise UsageError(f"unknown check id {check_id!r}{hint}") from None

    def select(self, only: Sequence[str] | None = None, target: str = "cluster") -> list[Check]:
        """Checks by id or family name for one target kind; ``None``/empty means all of that kind."""
        if not only:
            return [c for c in self._checks.values() if target in c.targets]
        wanted: list[Check] = []
        for name in only:
            name = name.strip()
            if not name:
                continue
            if name in self._checks:
                matched = [self._checks[name]]
            else:
                matched = [c for c in self._checks.values() if c.family == name]
                if not matched:
                    raise UsageError(self._unknown_message(name))
            wrong = [c.id for c in matched if target not in c.targets]
            if wrong and len(wrong) == len(matched):
                where = "on the node itself (fmdoctor check --local)" if target == "cluster" else "against a cluster"
                raise UsageError(f"{', '.join(wrong)} runs only {where}")
            wanted.extend(c for c in matched if c not in wanted and target in c.targets)
        if not wanted:
            raise UsageError("--only names no check")
        return wanted

    def iam_actions(self, checks: Iterable[Check] | None = None) -> list[str]:
        actions = {a for c in (checks if checks is not None else self) for a in c.iam_actions}
        return sorted(actions)

    def _unknown_message(self, name: str) -> str:
        close = suggest(name, self.ids() + self.families())
        hint = f"; did you mean {', '.join(close)}?" if close else "; see 'fmdoctor checks list'"
        return f"unknown check id or family {name!r}{hint}"


@lru_cache(maxsize=1)
def default_registry() -> Registry:
    from fmdoctor.checks import ALL_CHECKS, ANNOTATORS, STARTERS

    return Registry(ALL_CHECKS, ANNOTATORS, STARTERS)
