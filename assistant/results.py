"""What every tool returns: a structured result (HolmesGPT style), never an exception into the model.

The model gets :meth:`ToolResult.content` (the text of :mod:`fmdoctor.assistant.digest`: every finding as
one line, bounded evidence, nothing dropped silently; invisible characters stripped; delimited as data);
front ends and the offline planner get :meth:`ToolResult.artifact` (the full result, findings
included) through LangChain's ``response_format="content_and_artifact"``.
"""

from __future__ import annotations

import contextlib
import json
import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from fmdoctor.assistant.digest import (
    MCP_MORE,
    More,
    grouping_of,
    incident_head,
    one_line,
    ordered,
    parse,
    render,
    severity_counts,
)
from fmdoctor.assistant.safety import delimit, strip_invisible, undelimit
from fmdoctor.engine.model import Report

DEFAULT_CONTENT_LIMIT = 12_000  # characters of one tool output the model sees (agent.max_tool_output_chars)
ASSISTANT_MORE = More()
DATA_PREFIX = "data: "
_COUNTED = re.compile(r"[1-9]\d* (matching )?findings?\b")
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
        result = cls.from_report_json(tool, report.to_json_dict())
        nodes = report.resolved_nodes()  # the run's node identities, for regrouping these findings (grouping_of)
        if nodes:
            result.data["nodes"] = nodes
        return result

    @classmethod
    def from_report_json(cls, tool: str, raw: dict[str, Any]) -> ToolResult:
        """From a report's JSON (``fmdoctor check --format json``, what the MCP ``check`` tool returns)."""
        ran, errors, findings = raw["stats"]["checks_run"], raw["errors"], raw["findings"]
        if ran:
            status, count = ToolStatus.SUCCESS, len(findings)
            message = (f"{count} finding{'s' if count != 1 else ''} ({severity_counts(findings)}) from {len(ran)} "
                       "checks" if count else f"no findings: {', '.join(ran)} ran and found nothing")
            if errors:
                message += f"; {len(errors)} part{'s' if len(errors) != 1 else ''} could not be verified"
        elif errors:
            status, message = ToolStatus.ERROR, "nothing could be verified: " + "; ".join(
                f"{e['check']}: {e['code']}" for e in errors)
        else:
            status, message = ToolStatus.NO_DATA, "no check applied to this cluster"
        return cls(tool=tool, status=status, message=message, findings=ordered(findings), errors=errors,
                   skipped=raw["skipped"], checks_run=ran,
                   data={"cluster": raw["cluster"], "region": raw["region"], "report_status": raw["status"],
                         **({"demo": True} if raw.get("demo") else {})})

    @property
    def found_any(self) -> bool:
        """Findings in this result, listed or (in an earlier question's shortened result) only counted."""
        return bool(self.findings) or _COUNTED.match(self.message) is not None

    @property
    def finding_ids(self) -> list[str]:
        return [f["id"] for f in self.findings]

    def artifact(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def content(self, limit: int = DEFAULT_CONTENT_LIMIT, more: More = ASSISTANT_MORE) -> str:
        """:meth:`text`, delimited as data (see :func:`~fmdoctor.assistant.safety.delimit`)."""
        return delimit(self.tool, self.text(limit, more))

    def text(self, limit: int = DEFAULT_CONTENT_LIMIT, more: More = ASSISTANT_MORE) -> str:
        """The model's view (:mod:`fmdoctor.assistant.digest`): a status line, every finding as one line with
        an evidence digest, what could not be verified; other data as compact JSON."""
        head = [f"{self.status.value}: {one_line(self.message)}"]
        cluster, region = self.data.get("cluster"), self.data.get("region")
        if cluster:
            state = self.data.get("report_status")
            head.append(f"cluster: {cluster}" + (f" ({region})" if region else "")
                        + (f", status {state}" if state else ""))
        extra = {k: v for k, v in self.data.items() if k not in _RESERVED and k not in _SHOWN}
        text = "\n".join(head)
        if self.findings or self.checks_run or self.errors or self.skipped:
            offset = int(self.data.get("offset") or 0)
            if not offset:  # a later page's findings are a slice: their grouping would be partial
                head += incident_head(self.findings, limit // 12, cluster=cluster, region=region,
                                      **grouping_of([self]))
            text = render(self.findings, limit, head=head, errors=self.errors, checks_run=self.checks_run,
                          skipped=self.skipped, offset=offset, total=self.data.get("total"), more=more)
        if extra:
            text += "\n" + _data_text(extra, limit - len(text))
        return strip_invisible(text)


# data the head or the findings section already states
_SHOWN = frozenset({"cluster", "region", "report_status", "offset", "total", "nodes", "demo"})


def _data_text(data: dict[str, Any], room: int) -> str:
    """Tool-specific data: Markdown as text, the rest as compact JSON; cut with the size of the cut."""
    markdown = data.get("markdown") if isinstance(data.get("markdown"), str) else None
    rest = {k: v for k, v in data.items() if k != "markdown"}
    text = DATA_PREFIX + json.dumps(rest, ensure_ascii=False, default=str, separators=(",", ":")) if rest else ""
    if markdown is not None:
        text = (text + "\n" if text else "") + markdown
    room = max(room, 200)
    if len(text) <= room:
        return text
    keep = room - 80
    return (f"{text[:keep]}\n[... the last {len(text) - keep} of {len(text)} characters of this result are left out "
            "at the tool-output limit (agent.max_tool_output_chars)]")


def report_text(report: dict[str, Any], limit: int = DEFAULT_CONTENT_LIMIT, more: More = MCP_MORE) -> str:
    """A report's JSON as the text a model reads (the MCP ``check`` tool's text content)."""
    return ToolResult.from_report_json("check", report).text(limit, more)


def result_of(message: Any) -> ToolResult | None:
    """The :class:`ToolResult` behind a ToolMessage: its artifact, else what its text states (status,
    message, finding lines, not-verified lines, the data line)."""
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, dict) and "status" in artifact and "tool" in artifact:
        return ToolResult.model_validate(artifact)
    content = getattr(message, "content", "")
    if not isinstance(content, str):
        return None
    lines = undelimit(content).splitlines()
    status, _, text = (lines[0] if lines else "").partition(": ")
    if status not in set(ToolStatus):
        return None
    parsed = parse(lines[1:])
    for line in (line for line in lines if line.startswith(DATA_PREFIX)):  # what _data_text wrote
        with contextlib.suppress(ValueError):
            parsed["data"] |= json.loads(line[len(DATA_PREFIX):])
    return ToolResult(tool=getattr(message, "name", None) or "tool", status=ToolStatus(status), message=text,
                      **parsed)


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
