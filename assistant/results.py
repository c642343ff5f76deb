"""What every tool returns: a structured result (HolmesGPT style), never an exception into the model.

The model gets :meth:`ToolResult.content` (compact JSON, invisible characters stripped, truncated, delimited
as data); front ends and the offline planner get :meth:`ToolResult.artifact` (the full result, findings
included) through LangChain's ``response_format="content_and_artifact"``.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from fmdoctor.assistant.safety import delimit, strip_invisible, truncate, undelimit
from fmdoctor.engine.model import Report

DEFAULT_CONTENT_LIMIT = 12_000  # characters of one tool output the model sees
_RESERVED = frozenset({"status", "message", "findings", "errors", "skipped", "checks_run"})


class ToolStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"
    NO_DATA = "no_data"
    APPROVAL_REQUIRED = "approval_required"


class ToolResult(BaseModel):
    tool: str
    status: ToolStatus
    message: str = Field("", description="One line: what happened, for the model and the person.")
    findings: list[dict[str, Any]] = Field(default_factory=list, description="Finding JSON, each with its id.")
    errors: list[dict[str, Any]] = Field(default_factory=list, description="What could not be verified.")
    skipped: list[dict[str, Any]] = Field(default_factory=list)
    checks_run: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict, description="Tool-specific payload (plan, hops, runbook).")

    @classmethod
    def error(cls, tool: str, message: str, **data: Any) -> ToolResult:
        return cls(tool=tool, status=ToolStatus.ERROR, message=message, data=data)

    @classmethod
    def from_report(cls, tool: str, report: Report) -> ToolResult:
        raw = report.to_json_dict()
        if report.stats.checks_run:
            status = ToolStatus.SUCCESS
            count = len(report.findings)
            message = (f"{count} finding{'s' if count != 1 else ''} from {len(report.stats.checks_run)} checks"
                       if count else f"no findings: {', '.join(report.stats.checks_run)} ran and found nothing")
            if report.errors:
                message += f"; {len(report.errors)} part{'s' if len(report.errors) != 1 else ''} could not be verified"
        elif report.errors:
            status, message = ToolStatus.ERROR, "nothing could be verified: " + "; ".join(
                f"{e.check}: {e.code}" for e in report.errors)
        else:
            status, message = ToolStatus.NO_DATA, "no check applied to this cluster"
        return cls(tool=tool, status=status, message=message, findings=raw["findings"], errors=raw["errors"],
                   skipped=raw["skipped"], checks_run=report.stats.checks_run,
                   data={"cluster": report.cluster, "region": report.region, "report_status": report.status.value})

    @property
    def finding_ids(self) -> list[str]:
        return [f["id"] for f in self.findings]

    def artifact(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def content(self, limit: int = DEFAULT_CONTENT_LIMIT) -> str:
        shown: dict[str, Any] = {"status": self.status.value, "message": self.message}
        if self.findings:
            shown["findings"] = [
                {k: f[k] for k in ("id", "severity", "summary", "evidence", "runbook") if k in f} for f in self.findings
            ]
        for key in ("errors", "skipped", "checks_run"):
            if getattr(self, key):
                shown[key] = getattr(self, key)
        shown.update({k: v for k, v in self.data.items() if k not in _RESERVED})  # data never masks the status
        body = strip_invisible(json.dumps(shown, ensure_ascii=False, default=str, separators=(",", ":")))
        return delimit(self.tool, truncate(body, limit))


def result_of(message: Any) -> ToolResult | None:
    """The :class:`ToolResult` behind a ToolMessage: its artifact, else its delimited JSON content."""
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, dict) and "status" in artifact and "tool" in artifact:
        return ToolResult.model_validate(artifact)
    content = getattr(message, "content", "")
    if not isinstance(content, str):
        return None
    try:
        data = json.loads(undelimit(content))
    except ValueError:
        return None
    if not isinstance(data, dict) or "status" not in data:
        return None
    known = {k: data.pop(k) for k in _RESERVED if k in data}
    for finding in known.get("findings") or []:  # the model's copy leaves out what the id already says
        if isinstance(finding, dict) and "/" in str(finding.get("id", "")):
            check, resource = str(finding["id"]).split("/", 1)
            finding.setdefault("check", check)
            finding.setdefault("resource", resource)
    try:
        return ToolResult(tool=getattr(message, "name", None) or "tool", data=data, **known)
    except ValueError:
        return None


# A citation is a finding id: '<check-id>/<resource>' (resources may contain '/', e.g. 'cluster/x' or s3 URIs).
_CITATION = re.compile(r"\b([a-z][a-z0-9]*(?:-[a-z0-9]+)*)/([A-Za-z0-9][A-Za-z0-9:._/+=@-]*[A-Za-z0-9])")


def split_citations(text: str, known_ids: list[str], check_ids: set[str]) -> tuple[list[str], list[str]]:
    """(finding ids from tool output that the answer cites, finding-id-shaped references it makes that no
    tool returned). Only references whose check part is a real check id count, so prose is not misread."""
    cited = [i for i in known_ids if i in text]
    unknown = []
    for match in _CITATION.finditer(text):
        reference = f"{match.group(1)}/{match.group(2)}"
        if match.group(1) in check_ids and not any(k.startswith(reference) or reference.startswith(k) for k in cited):
            unknown.append(reference)
    return list(dict.fromkeys(cited)), list(dict.fromkeys(unknown))
