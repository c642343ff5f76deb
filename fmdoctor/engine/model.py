"""The data every front end shares: findings, error entries and the report of one run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from fmdoctor.engine.incidents import Incident, build_incidents, node_names


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class Status(StrEnum):
    """Monitoring-plugin convention: the exit code of ``fmdoctor check`` is ``Status.exit_code``."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"
    UNKNOWN = "unknown"

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "warning": 1, "critical": 2, "unknown": 3}[self.value]

    @classmethod
    def worst(cls, statuses: list[Status]) -> Status:
        order = [cls.OK, cls.WARNING, cls.CRITICAL, cls.UNKNOWN]
        return max(statuses, key=order.index, default=cls.OK)


class Finding(BaseModel):
    """One proven problem: which check saw it, on what, the facts that prove it, and the runbook that fixes it."""

    model_config = ConfigDict(frozen=True)

    check: str = Field(description="Stable id of the check that raised it, e.g. 'efa-sg-self-reference'.")
    severity: Severity
    resource: str = Field(description="AWS id or URI of the resource at fault.")
    summary: str = Field(description="One plain sentence a person can act on.")
    evidence: dict[str, Any] = Field(default_factory=dict, description="Facts that prove it.")
    runbook: str = Field(description="Id of the runbook that fixes it.")

    @property
    def id(self) -> str:
        """Stable identity across runs: what a watcher diffs and what an answer cites."""
        return f"{self.check}/{self.resource}"


class CheckError(BaseModel):
    """A check (or part of one) that could not run; what it could not verify is not reported as healthy."""

    check: str
    code: str = Field(description="AWS error code or fmdoctor's own, e.g. 'AccessDenied', 'Throttling'.")
    iam_action: str | None = Field(default=None, description="The IAM action that was denied, when known.")
    unverified: str = Field(description="What could not be verified because of this error.")
    message: str = ""


class Skipped(BaseModel):
    """A check that did not apply to this target (e.g. no checkpoint location configured)."""

    check: str
    reason: str


class RunStats(BaseModel):
    api_calls: dict[str, int] = Field(default_factory=dict, description="AWS API calls by 'service.Operation'.")
    queries: dict[str, int] = Field(
        default_factory=dict, description="Calls to metric sources that are not AWS APIs ('prometheus.query_range')."
    )
    duration_s: float = 0.0
    checks_run: list[str] = Field(default_factory=list)


class Report(BaseModel):
    cluster: str
    region: str
    generated_at: datetime
    status: Status
    findings: list[Finding] = Field(default_factory=list)
    errors: list[CheckError] = Field(default_factory=list)
    skipped: list[Skipped] = Field(default_factory=list)
    stats: RunStats = Field(default_factory=RunStats)
    demo: bool = Field(False, description="The demo's in-process AWS (--demo), not an account: its fix commands "
                       "carry --demo. In the JSON only when true.")
    # The run's node-identity resolver (fmdoctor.engine.identity.NodeIdentities.node_of), set by the run that read
    # the inventory; a report read back from JSON has none and its incidents meet on the names findings carry.
    _node_of: Callable[[str], str | None] | None = PrivateAttr(default=None)

    def resolved_nodes(self) -> dict[str, str]:
        """{node name a finding carries: its instance id} as the run's resolver answers them, for a reader that
        regroups these findings without the run (the assistant's tool results)."""
        if self._node_of is None:
            return {}
        return {name: found for name in sorted(node_names(self.findings)) if (found := self._node_of(name))}

    def with_node_of(self, node_of: Callable[[str], str | None] | None) -> Report:
        self._node_of = node_of
        return self

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def findings_for(self, check: str) -> list[Finding]:
        return [f for f in self.findings if f.check == check]

    def incidents(self, node_of: Callable[[str], str | None] | None = None) -> list[Incident]:
        """The findings grouped by the thing at fault, most urgent first (:mod:`fmdoctor.engine.incidents`);
        ``node_of`` maps a host name a finding carries to its instance id: by default the run's own resolver, so
        every front end that shows this report's incidents (text, Markdown, JSON, Slack, the TUI, serve) groups
        through the one node identity."""
        return build_incidents(self.findings, now=self.generated_at, cluster=self.cluster or None,
                               region=self.region or None, node_of=node_of or self._node_of, demo=self.demo)

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for raw, finding in zip(data["findings"], self.findings, strict=True):
            raw["id"] = finding.id
        data["incidents"] = [incident.to_json_dict() for incident in self.incidents()]
        if not self.demo:
            data.pop("demo", None)
        return data


def status_for(findings: list[Finding], errors: list[CheckError], ran_any: bool) -> Status:
    """Worst finding wins; unverified parts never yield 'ok', and nothing verified at all is 'unknown'."""
    if not ran_any:
        return Status.UNKNOWN
    worst = max((f.severity.rank for f in findings), default=-1)
    if worst == Severity.CRITICAL.rank:
        return Status.CRITICAL
    if worst == Severity.WARNING.rank or errors:
        return Status.WARNING
    return Status.OK
