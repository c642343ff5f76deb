"""The library operations behind the non-check tools, found at run time.

Reachability (``fmdoctor.net.reachability``), runbooks (``fmdoctor.runbooks``) and remediation
(``fmdoctor.remediation``) are separate workstreams; a tool is offered to the model only when its module
imports and has the contract's functions (COMMON.md, "Library contracts"). Tests inject fakes of the same
contract through :class:`Backends` instead of patching imports.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


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
    def discover(cls) -> Backends:
        return cls(
            why_not=_load("fmdoctor.net.reachability", "why_not"),
            get_runbook=_load("fmdoctor.runbooks", "get_runbook"),
            plan_fix=_load("fmdoctor.remediation", "plan_fix"),
            preflight=_load("fmdoctor.remediation", "preflight"),
            apply_fix=_load("fmdoctor.remediation", "apply_fix"),
            record_decision=_load("fmdoctor.remediation", "record_decision"),
        )

    def record(self, doctor: Any, decision: str, reason: str, **fields: Any) -> None:
        """Audit a decision that changed nothing (no-op when remediation is not installed: nothing can change)."""
        if self.record_decision is not None:
            self.record_decision(doctor, decision, reason, channel=fields.pop("channel", "assistant"), **fields)


def _load(module: str, name: str) -> Callable[..., Any] | None:
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    except Exception:  # a broken optional module must not take the assistant down
        log.warning("could not import %s; its tools are not offered", module, exc_info=True)
        return None
    return found if callable(found) else None


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
