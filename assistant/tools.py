"""The agent's tools over the check engine: one per check family (generated from the registry, so families
other engineers add appear on their own), ``check_all``, ``list_findings`` and ``get_finding`` (one finding's
whole evidence, which the other results only digest).

Every tool takes a pydantic argument schema, reaches the engine through the injected ``ToolRuntime``
context (never a global), returns ``(content for the model, ToolResult artifact)`` and never raises into
the model. ``metadata["fmdoctor_access"]`` classifies each tool for the approval policy: ``read`` runs,
anything else needs an approval object (see :mod:`fmdoctor.assistant.policy`).
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
from collections.abc import Callable
from typing import Any, Literal

from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field, create_model
from pydantic.json_schema import SkipJsonSchema

from fmdoctor.assistant.digest import ordered
from fmdoctor.assistant.results import ToolResult, ToolStatus
from fmdoctor.assistant.session import AssistantContext
from fmdoctor.engine.errors import FmdoctorError
from fmdoctor.engine.model import Severity
from fmdoctor.engine.registry import Registry
from fmdoctor.engine.runner import CheckEvent

log = logging.getLogger(__name__)

ACCESS = "fmdoctor_access"
READ = "read"
MUTATE = "mutate"
EVENT = "fmdoctor"  # key of the custom stream events tools and middleware write
CHECK_ALL = "check_all"
LIST_FINDINGS = "list_findings"
GET_FINDING = "get_finding"

ToolReply = tuple[str, dict[str, Any]]
# An optional argument: null is accepted but not advertised (an anyOf-with-null per argument is schema weight
# sent with every model call, and models omit optional arguments anyway).
OrNone = SkipJsonSchema[None]


def reply(ctx: AssistantContext, result: ToolResult) -> ToolReply:
    return result.content(ctx.settings.max_tool_output_chars), result.artifact()


def run_safely(tool: str, ctx: AssistantContext, body: Callable[[], ToolResult]) -> ToolReply:
    """Run a tool body; fmdoctor errors and bugs become an error result the model can read and relay."""
    try:
        result = body()
    except FmdoctorError as exc:
        result = ToolResult.error(tool, str(exc))
    except Exception as exc:
        log.exception("tool %s failed", tool)
        result = ToolResult.error(tool, f"internal error in {tool}: {type(exc).__name__}")
    return reply(ctx, result)


def make_tool(name: str, description: str, args_schema: type[BaseModel], body: Callable[..., ToolResult],
              access: str = READ) -> BaseTool:
    """A tool whose ``body(runtime, **arguments)`` returns a ToolResult; the model's arguments are validated
    by ``args_schema`` and the runtime (context, stream writer) is injected by LangChain."""

    def run(*, runtime: ToolRuntime[AssistantContext], **arguments: Any) -> ToolReply:
        return run_safely(name, runtime.context, lambda: body(runtime, **arguments))

    return StructuredTool.from_function(run, name=name, description=compact(description), args_schema=args_schema,
                                        response_format="content_and_artifact", metadata={ACCESS: access})


def run_checks_result(ctx: AssistantContext, tool: str, only: list[str] | None,
                      write: Callable[[Any], None] | None = None) -> ToolResult:
    # Checks report progress from the engine's worker threads; LangGraph's writer reads context variables, so
    # it runs in a copy of this thread's context (one thread at a time: a context cannot be entered twice).
    captured, lock = contextvars.copy_context(), threading.Lock()

    def progress(event: CheckEvent) -> None:
        if write is not None:
            payload = {EVENT: "check", "check_id": event.check_id, "phase": event.phase, "findings": event.findings,
                       "done": event.done, "total": event.total}
            with lock:
                captured.run(write, payload)

    report = ctx.doctor.check(ctx.cluster, only=only, progress=progress, cancel=ctx.cancel)
    ctx.session.remember(report)
    return ToolResult.from_report(tool, report)


def tool_name_for_family(family: str) -> str:
    name = "check_" + re.sub(r"[^a-z0-9_]+", "_", family.lower()).strip("_")
    return name if name not in (CHECK_ALL, "check_") else f"check_family_{family}"


def compact(text: str) -> str:
    """One line: descriptions go with every model call, so no docstring indentation or line breaks."""
    return " ".join(text.split())


def family_tool(family: str, checks: list[Any]) -> BaseTool:
    ids = tuple(c.id for c in checks)
    name = tool_name_for_family(family)
    # The ids appear once, in the enum (the offline planner and every provider read them there).
    args = create_model(f"{name.title().replace('_', '')}Args",
                        checks=(list[Literal[ids]], Field(default=[], description="Only these (default: all).")))

    def body(runtime: ToolRuntime[AssistantContext], checks: list[str] | None = None) -> ToolResult:
        only = [c for c in (checks or ids) if c in ids] or list(ids)
        return run_checks_result(runtime.context, name, only, runtime.stream_writer)

    return make_tool(name, f"Run the {family} checks.", args, body)


class CheckAllArgs(BaseModel):
    # (a tool without arguments would not get its runtime injected: LangChain skips input parsing for those)
    only: list[str] = Field(default=[], description="Check ids or families (default: every check).")


def check_all_tool() -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], only: list[str] | None = None) -> ToolResult:
        return run_checks_result(runtime.context, CHECK_ALL, only or None, runtime.stream_writer)

    return make_tool(CHECK_ALL, "Run every check (a full health check): for general questions, or when no family "
                     "fits.", CheckAllArgs, body)


class ListFindingsArgs(BaseModel):
    severity: Literal["critical", "warning", "info"] | OrNone = Field(None, description="Minimum severity.")
    check: str | OrNone = Field(None, description="A check id or family.")
    resource: str | OrNone = Field(None, description="Part of a resource id or name.")
    offset: int = Field(0, ge=0, description="Skip this many (a long list continues here).")


def _ensure_results(ctx: AssistantContext, only: list[str] | None = None) -> bool:
    """Run the checks when nothing ran in this conversation yet, so an answer is grounded; True if it ran."""
    if ctx.session.has_results():
        return False
    ctx.session.remember(ctx.doctor.check(ctx.cluster, only=only, cancel=ctx.cancel))
    return True


def list_findings_tool(registry: Registry) -> BaseTool:
    families = {c.id: c.family for c in registry}

    def body(runtime: ToolRuntime[AssistantContext], severity: str | None = None, check: str | None = None,
             resource: str | None = None, offset: int = 0) -> ToolResult:
        ctx = runtime.context
        ran_now = _ensure_results(ctx)
        floor = Severity(severity).rank if severity else -1
        found = ordered(f.model_dump(mode="json") | {"id": f.id} for f in ctx.session.findings()
                        if f.severity.rank >= floor
                        and (not check or check in (f.check, families.get(f.check)))
                        and (not resource or resource.lower() in f.resource.lower()))
        status = ToolStatus.SUCCESS if found else ToolStatus.NO_DATA
        where = "all checks just ran" if ran_now else "from the checks run earlier in this conversation"
        return ToolResult(tool=LIST_FINDINGS, status=status, message=f"{len(found)} matching findings ({where})",
                          findings=found[offset:], data={"cluster": ctx.cluster, "offset": offset,
                                                         "total": len(found)})

    return make_tool(LIST_FINDINGS, "List the findings of this conversation's checks (runs every check if none has "
                     "run), by minimum severity, check id or family, or resource.", ListFindingsArgs, body)


class GetFindingArgs(BaseModel):
    id: str = Field(description="A finding id: check/resource.")


def get_finding_tool(registry: Registry) -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], id: str) -> ToolResult:  # noqa: A002 (the model's word)
        ctx = runtime.context
        check = id.split("/", 1)[0]
        if ctx.session.finding(id) is None and ctx.session.report_for(check) is None and check in registry.ids():
            ctx.session.remember(ctx.doctor.check(ctx.cluster, only=[check], cancel=ctx.cancel))
        finding = ctx.session.finding(id)
        if finding is None:
            known = [f.id for f in ctx.session.findings() if f.check == check]
            hint = f"; {check} found: {', '.join(known[:20])}" if known else ""
            return ToolResult(tool=GET_FINDING, status=ToolStatus.NO_DATA,
                              message=f"no finding {id!r} in this conversation{hint}")
        data = finding.model_dump(mode="json") | {"id": finding.id}
        return ToolResult(tool=GET_FINDING, status=ToolStatus.SUCCESS, message=f"finding {finding.id}, all evidence",
                          findings=[data], data={"evidence": data["evidence"]})

    return make_tool(GET_FINDING, "One finding with all of its evidence, by id (check/resource).", GetFindingArgs,
                     body)


def check_tools(registry: Registry) -> list[BaseTool]:
    by_family: dict[str, list[Any]] = {}
    for check in registry.select(None):  # cluster checks; on-node checks need the node itself
        by_family.setdefault(check.family, []).append(check)
    return [family_tool(f, checks) for f, checks in by_family.items()] + [
        check_all_tool(), list_findings_tool(registry), get_finding_tool(registry)]
