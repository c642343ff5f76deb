"""The fleet report: one entry per account/region scope, one per cluster with its full check report.

JSON (``fmdoctor fleet check --format json``), stable and versioned by ``schema``::

    {schema, generated_at, status, accounts, summary{clusters, scopes, scopes_failed, clusters_by_status{}},
     scopes[{account, region, status, clusters, error}],
     clusters[{account, region, cluster, kinds[], instances, status, error, report}],
     stats{api_calls{}, api_calls_total, duration_s, concurrency}}

``error`` is null or ``{check, code, iam_action, unverified, message}`` (the shape of a report's
``errors[]``); ``report`` is exactly what ``fmdoctor check --format json`` prints, or null when the
cluster could not be checked at all.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from fmdoctor.engine.model import CheckError, Report, Severity, Status

SCHEMA = "fmdoctor.fleet/v1"
ASSUME_ROLE = "assume-role"
DISCOVERY = "discovery"
CLUSTER = "cluster"


class ScopeResult(BaseModel):
    account: str
    region: str
    status: Status = Field(description="'ok' when the scope was scanned; 'unknown' when it could not be.")
    clusters: int = 0
    error: CheckError | None = None


class ClusterResult(BaseModel):
    account: str
    region: str
    cluster: str
    kinds: list[str] = Field(default_factory=list)
    instances: int = 0
    status: Status
    error: CheckError | None = None
    report: Report | None = None

    def worst_findings(self, limit: int = 2) -> str:
        """'efa-sg-self-reference, efa-subnet-spread (+1 critical, 2 warning)': for the summary table."""
        if self.report is None:
            return _brief(f"{self.error.code}: {self.error.message}") if self.error else ""
        findings = self.report.findings  # already sorted worst first
        if not findings:
            errors = self.report.errors
            return f"{len(errors)} unverified ({errors[0].check}: {errors[0].code})" if errors else ""
        shown = list(dict.fromkeys(f.check for f in findings if f.severity == findings[0].severity))[:limit]
        rest = [f for f in findings if f.check not in shown]
        extra = [f"{n} {s.value}" for s in Severity if (n := sum(1 for f in rest if f.severity == s))]
        return ", ".join(shown) + (f" (+{', '.join(extra)})" if extra else "")


def _brief(text: str, width: int = 72) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class FleetStats(BaseModel):
    api_calls: dict[str, int] = Field(default_factory=dict)
    api_calls_total: int = 0
    duration_s: float = 0.0
    concurrency: int = 0


class FleetReport(BaseModel):
    schema_id: str = Field(SCHEMA, serialization_alias="schema")
    generated_at: datetime
    status: Status
    accounts: int = 0
    scopes: list[ScopeResult] = Field(default_factory=list)
    clusters: list[ClusterResult] = Field(default_factory=list)
    stats: FleetStats = Field(default_factory=FleetStats)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    def failed_scopes(self) -> list[ScopeResult]:
        return [s for s in self.scopes if s.error is not None]

    def summary(self) -> dict[str, Any]:
        by_status = {s.value: sum(1 for c in self.clusters if c.status == s) for s in Status}
        return {"clusters": len(self.clusters), "scopes": len(self.scopes),
                "scopes_failed": len(self.failed_scopes()), "clusters_by_status": by_status}

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", by_alias=True, exclude={"clusters"})
        data["summary"] = self.summary()
        data["clusters"] = [
            {**c.model_dump(mode="json", exclude={"report"}), "report": c.report.to_json_dict() if c.report else None}
            for c in self.clusters
        ]
        order = ["schema", "generated_at", "status", "accounts", "summary", "scopes", "clusters", "stats"]
        return {key: data[key] for key in order}


def fleet_status(scopes: list[ScopeResult], clusters: list[ClusterResult]) -> Status:
    """Worst over the fleet, as ``fmdoctor check`` ranks it; an empty fleet verified nothing: unknown."""
    if not clusters:
        return Status.UNKNOWN
    return Status.worst([s.status for s in scopes] + [c.status for c in clusters])
