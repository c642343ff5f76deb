"""The library operations behind the non-check tools: reachability, runbooks and remediation.

The assistant calls them through :class:`Backends` so a test can hand it fakes of the same signatures through
the constructor; :meth:`Backends.library` binds the package's own functions, imported directly, so a broken
module fails loudly instead of silently removing its tools.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fmdoctor.net.reachability import why_not
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.audit import record_decision
from fmdoctor.remediation.plan import plan_fix
from fmdoctor.remediation.preflight import preflight
from fmdoctor.runbooks import get_runbook


@dataclass(frozen=True)
class Backends:
    # why_not(doctor, cluster, source, destination, port, protocol="tcp") -> ReachabilityResult
    why_not: Callable[..., Any] | None = None
    # get_runbook(runbook_id, settings=None) -> Runbook (raises UsageError when unknown); Runbook.render(...)
    get_runbook: Callable[..., Any] | None = None
    # plan_fix(doctor, cluster, check_id, resource=None, report=None) -> FixPlan
    plan_fix: Callable[..., Any] | None = None
    # preflight(doctor, plan) -> PreflightResult (optional even when plan_fix exists)
    preflight: Callable[..., Any] | None = None
    # apply_fix(doctor, plan, approval) -> FixResult; refuses a missing or mismatched approval
    apply_fix: Callable[..., Any] | None = None
    # record_decision(doctor, decision, reason, plan=None, approver=None, channel=None, **fields): one audit
    # record for a decline or a refusal (an approval is recorded by apply_fix)
    record_decision: Callable[..., Any] | None = None

    @property
    def remediation(self) -> bool:
        return self.plan_fix is not None and self.apply_fix is not None

    @classmethod
    def library(cls) -> Backends:
        """The package's own implementations."""
        return cls(why_not=why_not, get_runbook=get_runbook, plan_fix=plan_fix, preflight=preflight,
                   apply_fix=apply_fix, record_decision=record_decision)

    def record(self, doctor: Any, decision: str, reason: str, **fields: Any) -> None:
        """Audit a decision that changed nothing (no-op for a test's Backends without a recorder)."""
        if self.record_decision is not None:
            self.record_decision(doctor, decision, reason, channel=fields.pop("channel", "assistant"), **fields)


def to_plain(value: Any) -> Any:
    """A contract object as JSON-ready data: ``to_json_dict()``, a pydantic model, a dataclass, else ``str``."""
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    if callable(getattr(value, "to_json_dict", None)):
        return value.to_json_dict()
    if callable(getattr(value, "model_dump", None)):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json.loads(json.dumps(dataclasses.asdict(value), default=str))
    return str(value)
