"""What the MCP tools do, without the MCP SDK: the same engine, runbook and remediation calls as the CLI.

Kept apart from :mod:`fmdoctor.mcp.server` so the logic is plain synchronous Python (the SDK runs sync tools
in worker threads) and the approval rules can be read in one place. Every method returns JSON-ready data
or raises :class:`~fmdoctor.engine.errors.FmdoctorError`; the server turns those into tool errors.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.errors import UsageError
from fmdoctor.remediation.audit import AuditLog, plan_fields, who
from fmdoctor.safety.redact import Redactor, redactor_for

if TYPE_CHECKING:  # the rest is imported by the tools that use it, so the server answers initialize sooner
    from fmdoctor.engine.api import Doctor
    from fmdoctor.remediation.plan import FixPlan

# fmdoctor.remediation.apply.DEFAULT_VERIFY_DELAYS (a test keeps them equal), without importing apply at start.
DEFAULT_VERIFY_DELAYS = (2.0, 5.0)

PLAN_TTL_S = 15 * 60  # a digest from plan_fix is good for this long (then plan again: state moves on)
MAX_PLANS = 256  # per ledger scope; the oldest are forgotten first


@dataclass
class PlanLedger:
    """Digests that plan_fix handed out, per scope (an MCP session), so apply_fix can tell a plan the client
    was shown from a digest it made up. Bounded and expiring; thread-safe (tools run in worker threads)."""

    ttl_s: float = PLAN_TTL_S
    clock: Any = time.monotonic
    _scopes: dict[str, OrderedDict[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self, scope: str, digest: str) -> None:
        with self._lock:
            plans = self._scopes.setdefault(scope, OrderedDict())
            plans.pop(digest, None)
            plans[digest] = self.clock() + self.ttl_s
            while len(plans) > MAX_PLANS:
                plans.popitem(last=False)

    def issued(self, scope: str, digest: str) -> bool:
        with self._lock:
            expires = self._scopes.get(scope, {}).get(digest)
            return expires is not None and expires > self.clock()


@dataclass(frozen=True)
class Prepared:
    """A fix as apply_fix sees it before asking: the current plan, its pre-flight, and why it cannot go ahead."""

    plan: FixPlan | None
    preflight: dict[str, Any] | None = None
    refusal: str | None = None  # set: do not ask anyone, refuse (audited)
    nothing_to_do: bool = False

    @property
    def askable(self) -> bool:
        return self.plan is not None and self.refusal is None and not self.nothing_to_do


@dataclass
class McpService:
    doctor: Doctor
    cluster: str | None = None  # the default target (--cluster / config); a tool argument overrides it
    allow_fixes: bool = False
    audit: AuditLog = field(default_factory=AuditLog)
    ledger: PlanLedger = field(default_factory=PlanLedger)
    verify_delays: Sequence[float] = DEFAULT_VERIFY_DELAYS

    @property
    def redactor(self) -> Redactor:
        """The one policy plus this configuration's ``agent.redact``: results reach the client's model."""
        return redactor_for(self.doctor.settings)

    # --- read-only tools ---------------------------------------------------------------------------------

    def check(self, cluster: str | None = None, only: list[str] | str | None = None) -> dict[str, Any]:
        """The same JSON as ``fmdoctor check --format json``; ``only`` as a list or 'a,b' like ``--only``."""
        ids = [i.strip() for i in (only.split(",") if isinstance(only, str) else only or []) if i.strip()]
        return self.doctor.check(self._cluster(cluster), only=ids or None).to_json_dict()

    def list_checks(self) -> list[dict[str, Any]]:
        return [{"id": c.id, "family": c.family, "severity": c.severity.value, "proves": c.proves(),
                 "iam_actions": list(c.iam_actions), "runbook": c.runbook_id()} for c in self.doctor.registry]

    def why_not(self, source: str, destination: str, port: str | int | None = None, protocol: str = "tcp",
                cluster: str | None = None) -> dict[str, Any]:
        """The same JSON as ``fmdoctor why-not --format json``; ``port`` 22, '22', '1018-1023' or '988,1018-1023'."""
        from fmdoctor.net.reachability import why_not

        ports = None if port is None else str(port)
        return why_not(self.doctor, self._cluster(cluster), source, destination, ports, protocol).to_json_dict()

    def list_runbooks(self) -> list[dict[str, Any]]:
        from fmdoctor.runbooks import list_runbooks

        return [r.to_json_dict() for r in list_runbooks(self.doctor.settings)]

    def get_runbook(self, runbook_id: str, finding_id: str | None = None, finding: dict[str, Any] | None = None,
                    cluster: str | None = None) -> dict[str, Any]:
        """The runbook as Markdown: for ``finding_id`` (``check/resource``, looked up by running that check now),
        for a ``finding`` object, or with placeholders when neither is given."""
        from fmdoctor.runbooks import get_runbook

        runbook = get_runbook(runbook_id, self.doctor.settings)
        name = self._cluster(cluster) if (cluster or self.cluster or finding_id) else None
        region = None
        if finding_id is not None:
            check_id, _, resource = finding_id.partition("/")
            if check_id not in runbook.checks:
                raise UsageError(f"runbook {runbook.id} does not answer check {check_id!r}",
                                 hint=f"it answers: {', '.join(runbook.checks)}")
            report = self.doctor.check(name, only=[check_id])
            region = report.region
            matches = [f for f in report.to_json_dict()["findings"]
                       if f["check"] == check_id and (f["id"] == finding_id or f["resource"] == resource)]
            if not matches:
                raise UsageError(f"no current finding {finding_id} on {name}",
                                 hint="run the check tool for the finding ids raised now")
            finding = matches[0]
        markdown = runbook.render(finding, cluster=name, region=region or self.doctor.connection.region,
                                  demo=self.doctor.demo)
        return {**runbook.to_json_dict(), "finding": finding, "markdown": markdown}

    # --- fix tools ---------------------------------------------------------------------------------------

    def plan(self, check: str, resource: str | None, cluster: str | None, scope: str) -> dict[str, Any]:
        """plan_fix: the calls, their digest and the DryRun pre-flight. Changes nothing; the digest is remembered
        for ``scope`` so apply_fix can require that the client saw this plan."""
        from fmdoctor.remediation.plan import plan_fix
        from fmdoctor.remediation.preflight import preflight

        self._fixes_allowed()
        plan = plan_fix(self.doctor, self._cluster(cluster), check, resource=resource, audit=self.audit)
        checked = preflight(self.doctor, plan, audit=self.audit) if not plan.empty else None
        if not plan.empty:
            self.ledger.issue(scope, plan.digest)
        return {"plan": plan.to_json_dict(), "digest": plan.digest,
                "preflight": checked.to_json_dict() if checked else None,
                "next": ("nothing to apply" if plan.empty else
                         "call apply_fix with this digest; the person using the MCP client is asked to confirm "
                         "the exact calls before anything changes")}

    def prepare(self, check: str, resource: str | None, cluster: str | None, digest: str | None,
                scope: str) -> Prepared:
        """apply_fix, before asking: plan from the current state and refuse what a person should not be asked."""
        from fmdoctor.remediation.plan import plan_fix
        from fmdoctor.remediation.preflight import preflight

        self._fixes_allowed()
        plan = plan_fix(self.doctor, self._cluster(cluster), check, resource=resource, audit=self.audit)
        if plan.empty:
            return Prepared(plan, nothing_to_do=True)
        if digest is not None and not self.ledger.issued(scope, digest):
            return Prepared(plan, refusal="this digest was not handed out by plan_fix in this session "
                            "(or it expired): call plan_fix first")
        if digest is not None and digest != plan.digest:
            return Prepared(plan, refusal=f"the plan changed since plan_fix ({digest[:12]} -> {plan.digest[:12]}): "
                            "review the new plan with plan_fix")
        checked = preflight(self.doctor, plan, audit=self.audit)
        if not checked.passed:
            return Prepared(plan, checked.to_json_dict(),
                            refusal="the pre-flight shows it would fail: " + ", ".join(checked.denied_actions))
        return Prepared(plan, checked.to_json_dict())

    def refuse(self, prepared: Prepared, reason: str, event: str = "approval-refused",
               approver: str | None = None) -> dict[str, Any]:
        """Record why nothing was applied, and say so to the client."""
        plan = prepared.plan
        if plan is not None:
            extra = {"approver": approver, "channel": "mcp"} if approver else {}
            self.audit.record(event, **plan_fields(plan), who=who(plan.identity),
                              outcome="declined" if event == "declined" else "refused", reason=reason, **extra)
        return {"applied": False, "reason": reason, "plan": plan.to_json_dict() if plan else None,
                "preflight": prepared.preflight, "audit_log": str(self.audit.path)}

    def refuse_unreadable_answer(self, arguments: dict[str, Any], problem: str) -> None:
        """Audit a confirmation the client answered with no form or the wrong one (nothing was applied)."""
        digest = arguments.get("digest")
        self.audit.record("approval-refused", cluster=arguments.get("cluster") or self.cluster,
                          check=arguments.get("check"), resource=arguments.get("resource"),
                          plan_digest=digest if isinstance(digest, str) else None, who=who(None), channel="mcp",
                          outcome="refused", reason=f"the client's answer could not be read as approve: true "
                          f"({problem})")

    def apply(self, prepared: Prepared, approver: str) -> dict[str, Any]:
        """Apply after a person confirmed this exact plan through the client (the caller checked that)."""
        from fmdoctor.remediation.apply import apply_fix
        from fmdoctor.remediation.approval import Approval

        assert prepared.plan is not None and prepared.askable
        approval = Approval.grant(prepared.plan, approver=approver, channel="mcp elicitation")
        result = apply_fix(self.doctor, prepared.plan, approval, audit=self.audit, verify_delays=self.verify_delays)
        return {"applied": True, "ok": result.ok, "result": result.to_json_dict(), "audit_log": str(self.audit.path)}

    def _cluster(self, cluster: str | None) -> str:
        return self.doctor.resolve_cluster(cluster or self.cluster)

    def _fixes_allowed(self) -> None:
        if not self.allow_fixes:  # the tools are not even listed then; this guards direct library use
            raise UsageError("fix tools are disabled", hint="start the server with --allow-fixes")


def confirmation_message(prepared: Prepared) -> str:
    """What the person is asked. Deterministic (no timestamps): on protocol 2026-07-28 the question is asked
    again on every round and an answer counts only for the exact text it was given for."""
    plan = prepared.plan
    assert plan is not None
    lines = [f"fmdoctor wants to change AWS: {len(plan.steps)} call(s) to fix {plan.check} on cluster "
             f"{plan.cluster} ({plan.region}{', account ' + plan.account if plan.account else ''}).", ""]
    for n, step in enumerate(plan.steps, 1):
        lines.append(f"{n}. {step.service}:{step.operation} {_compact(step.params)}")
    lines += ["", f"plan digest {plan.digest}",
              "Approve only if you (a person) want exactly these calls applied now."]
    return "\n".join(lines)


def _compact(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
