"""Step 1, plan: re-run the check, turn its findings' fix hints into exact API calls, drop what is done.

The plan is always computed from the current state: the check runs again (a saved report only narrows
which findings to fix) and each call is compared with what AWS holds now. Its digest covers the target
(account, region, cluster, check) and every call's parameters, so an approval given for one plan cannot
be spent on another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.engine.model import Finding, Report
from fmdoctor.remediation.actions import PlannedCall, RemediationError, build_call, spec_for
from fmdoctor.remediation.audit import AuditLog, audit_log_for, caller_identity, plan_fields, who
from fmdoctor.remediation.current import reconcile
from fmdoctor.runbooks import Runbook, get_runbook
from fmdoctor.words import plural

if TYPE_CHECKING:  # a Doctor is passed in; importing the engine's front door here would close a circle
    from fmdoctor.engine.api import Doctor


@dataclass(frozen=True)
class FixPlan:
    cluster: str
    region: str
    account: str | None
    check: str
    resource: str | None
    findings: tuple[str, ...]  # ids of the findings the calls fix
    steps: tuple[PlannedCall, ...]
    satisfied: tuple[dict[str, Any], ...] = ()  # calls already in place: {call, reason}
    conflicts: tuple[dict[str, Any], ...] = ()  # calls that cannot be applied as planned: {call, reason}
    manual: tuple[dict[str, Any], ...] = ()  # findings with no automated fix: {finding, summary, runbook}
    notes: tuple[str, ...] = ()
    automated: bool = True  # False: the check's runbook declares no automated fix (follow the runbook)
    runbook: str = ""  # the check's runbook id
    unverified: tuple[str, ...] = ()  # what the check could not see (only a check without automated fix has any)
    identity: dict[str, Any] = field(default_factory=dict, compare=False)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC), compare=False)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The exact calls, as ``{service, operation, params}`` (plus action, summary, findings)."""
        return [step.to_json_dict() for step in self.steps]

    @property
    def empty(self) -> bool:
        return not self.steps

    @property
    def digest(self) -> str:
        """Recomputed from the content each time, so a plan changed after approval no longer matches."""
        body = {
            "version": 1,
            "account": self.account,
            "region": self.region,
            "cluster": self.cluster,
            "check": self.check,
            "calls": [{"service": s.service, "operation": s.operation, "params": s.params} for s in self.steps],
        }
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    @property
    def asynchronous(self) -> bool:
        return any(spec_for(s).asynchronous for s in self.steps)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "region": self.region,
            "account": self.account,
            "check": self.check,
            "resource": self.resource,
            "digest": self.digest,
            "empty": self.empty,
            "findings": list(self.findings),
            "calls": self.calls,
            "satisfied": list(self.satisfied),
            "conflicts": list(self.conflicts),
            "manual": list(self.manual),
            "notes": list(self.notes),
            "automated": self.automated,
            "runbook": self.runbook,
            "unverified": list(self.unverified),
            "created_at": self.created_at.isoformat(),
        }


def plan_fix(
    doctor: Doctor,
    cluster: str | None,
    check_id: str,
    resource: str | None = None,
    report: Report | Mapping[str, Any] | None = None,
    audit: AuditLog | None = None,
) -> FixPlan:
    """The calls that would fix ``check_id``'s findings on ``cluster`` now (optionally one resource, or only
    the findings of a saved report that are still raised). Read-only; the plan is audited."""
    check = doctor.registry.get(check_id)  # unknown check: UsageError with suggestions
    runbook = _runbook(check.runbook_id(), doctor)
    automated = runbook is None or runbook.automated
    name = doctor.resolve_cluster(cluster)
    current = doctor.check(name, only=[check_id])
    errors = [e for e in current.errors if e.check in (check_id, "inventory")]
    if errors and automated:
        first = errors[0]
        action = f" (needs {first.iam_action})" if first.iam_action else ""
        raise RemediationError(
            f"cannot plan a fix: {check_id} could not verify the current state: {first.code}{action}: "
            f"{first.unverified}",
            hint="fmdoctor changes nothing it cannot first check; " + (
                f"grant {first.iam_action} and retry" if first.iam_action else
                f"make it visible (fmdoctor runbook show {check.runbook_id()}) and retry"),
        )
    findings, notes = _select(current.findings_for(check_id), name, check_id, resource, report)

    steps: list[PlannedCall] = []
    manual: list[dict[str, Any]] = []
    for finding in findings:
        hints = finding.evidence.get("fix") or []
        known = [c for c in (build_call(h, check_id, finding.id) for h in hints) if c is not None]
        if len(known) < len(hints):
            notes.append(f"{finding.id}: some fix actions are not supported by this fmdoctor; see the runbook")
        if not known:
            manual.append({"finding": finding.id, "summary": finding.summary, "runbook": finding.runbook})
        steps.extend(known)
    steps = _dedupe(steps)

    aws = doctor.connect(doctor.cluster_settings(name))
    identity = caller_identity(aws)
    state = reconcile(aws, steps) if steps else None
    plan = FixPlan(
        cluster=name,
        region=aws.region,
        account=identity.get("account"),
        check=check_id,
        resource=resource,
        findings=tuple(f.id for f in findings if f.id not in {m["finding"] for m in manual}),
        steps=tuple(state.calls) if state else (),
        satisfied=tuple({"call": c.to_json_dict(), "reason": r} for c, r in state.satisfied) if state else (),
        conflicts=tuple({"call": c.to_json_dict(), "reason": r} for c, r in state.conflicts) if state else (),
        manual=tuple(manual),
        notes=tuple(notes + (state.warnings if state else [])),
        automated=automated,
        runbook=check.runbook_id(),
        unverified=tuple(f"{e.code}: {e.unverified}" for e in errors),
        identity=identity,
    )
    audit_log_for(doctor, audit).record(
        "plan", **plan_fields(plan), who=who(identity),
        outcome=f"{plural(len(plan.steps), 'call')} planned" if plan.steps else "nothing to apply",
        satisfied=list(plan.satisfied), conflicts=list(plan.conflicts), manual=list(plan.manual),
        notes=list(plan.notes), findings=list(plan.findings),
    )
    return plan


def _runbook(runbook_id: str, doctor: Doctor) -> Runbook | None:
    """The check's runbook (a user's overrides a built-in); None when there is none to read."""
    try:
        return get_runbook(runbook_id, settings=doctor.settings)
    except FmdoctorError:
        return None


def _select(findings: list[Finding], cluster: str, check_id: str, resource: str | None,
            report: Report | Mapping[str, Any] | None) -> tuple[list[Finding], list[str]]:
    notes: list[str] = []
    if report is not None:
        data = report.to_json_dict() if isinstance(report, Report) else report
        if not isinstance(data, Mapping) or not isinstance(data.get("findings"), list):
            raise RemediationError("the report is not an 'fmdoctor check --format json' report (no findings list)")
        if data.get("cluster") not in (None, cluster):
            raise RemediationError(f"the report is for cluster {data.get('cluster')!r}, not {cluster!r}")
        wanted = {f"{f.get('check')}/{f.get('resource')}" for f in data["findings"]
                  if isinstance(f, Mapping) and f.get("check") == check_id}
        current = {f.id for f in findings}
        notes += [f"{fid}: in the report but no longer raised; nothing to do" for fid in sorted(wanted - current)]
        findings = [f for f in findings if f.id in wanted]
    if resource is not None:
        if not any(f.resource == resource for f in findings):
            notes.append(f"no current {check_id} finding on {resource}")
        findings = [f for f in findings if f.resource == resource]
    return findings, notes


def _dedupe(steps: list[PlannedCall]) -> list[PlannedCall]:
    """Two findings asking for the same call get one call that fixes both."""
    merged: dict[tuple[str, str, str], PlannedCall] = {}
    for step in steps:
        key = step.signature()
        if key in merged:
            first = merged[key]
            merged[key] = PlannedCall(first.service, first.operation, first.params, first.action, first.summary,
                                      tuple(dict.fromkeys(first.findings + step.findings)))
        else:
            merged[key] = step
    return list(merged.values())
