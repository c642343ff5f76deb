"""``check_resource``: a question about one node, security group, endpoint, HyperPod instance group or bucket,
answered about it. The tool resolves the name (:func:`fmdoctor.engine.entities.find_entity`: a Name tag,
an id, an IP, ``s3://bucket``), runs the checks that concern that kind of thing (or the ones asked for) and
returns only the findings on it or involving it, and what could not be verified about it. An unknown name
is an error result that says what was tried and what is close, never an answer about something else.
"""

from __future__ import annotations

from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from fmdoctor.assistant.results import ToolResult, ToolStatus
from fmdoctor.assistant.session import AssistantContext
from fmdoctor.assistant.tools import make_tool, run_checks_result
from fmdoctor.engine import entities as e
from fmdoctor.engine.errors import TargetNotFound
from fmdoctor.words import plural

CHECK_RESOURCE = "check_resource"


class CheckResourceArgs(BaseModel):
    resource: str = Field(description="What the question names: a node's Name tag, instance id or IP, 'head', a "
                          "security group id or name, an endpoint name, a HyperPod instance group, or s3://bucket.")
    checks: list[str] | None = Field(None, description="Only these check ids (default: every check that looks at "
                                     "that kind of resource).")


def check_resource_tool() -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], resource: str, checks: list[str] | None = None) -> ToolResult:
        ctx = runtime.context
        inventory = ctx.doctor.inventory(ctx.cluster)
        try:
            entity = e.find_entity(inventory, resource)
        except TargetNotFound as exc:
            message = exc.message + (f"; {exc.hint}" if exc.hint else "")
            return ToolResult.error(CHECK_RESOURCE, message, unknown=resource, cluster=ctx.cluster)
        cluster_checks = ctx.doctor.registry.select(None)
        ids = {c.id for c in cluster_checks}
        note = _note(ctx, entity)
        default = list(e.BUCKET_CHECKS) if note else e.checks_for(entity, cluster_checks)
        wanted = [c for c in checks or () if c in ids] or default
        result = run_checks_result(ctx, CHECK_RESOURCE, wanted, runtime.stream_writer)
        return scoped(result, entity, e.other_tokens(inventory, entity), note)

    return make_tool(CHECK_RESOURCE, "Answer a question about one node, security group, SageMaker endpoint, HyperPod "
                     "instance group or S3 bucket: resolves the name, runs the checks that concern it and returns only "
                     "the findings on it or involving it (use it whenever the question names one).",
                     CheckResourceArgs, body)


def scoped(result: ToolResult, entity: e.Entity, others: list[str], note: str = "") -> ToolResult:
    """The run's result cut down to the entity: findings on it first, then those involving it."""
    related = [(e.relation(entity, f), f) for f in result.findings]
    on = [f for how, f in related if how == e.ON]
    involved = [f for how, f in related if how == e.INVOLVES]
    errors = [x for x in result.errors if e.concerns_error(entity, x, others)]
    count = len(on) + len(involved)
    message = (f"{plural(count, 'finding')} about {entity.label} ({len(on)} on it) from "
               f"{plural(len(result.checks_run), 'check')}" if count else
               f"no finding about {entity.label} from {plural(len(result.checks_run), 'check')}")
    if errors:
        message += f"; {plural(len(errors), 'part')} could not be verified"
    status = result.status if result.status is ToolStatus.ERROR else ToolStatus.SUCCESS
    return ToolResult(tool=CHECK_RESOURCE, status=status, message=message, findings=on + involved, errors=errors,
                      skipped=result.skipped, checks_run=result.checks_run,
                      data={**result.data, "entity": entity.to_json_dict(), "on": [f["id"] for f in on],
                            "involves": [f["id"] for f in involved], "note": note,
                            "other_findings": len(result.findings) - count})


def _note(ctx: AssistantContext, entity: e.Entity) -> str:
    if entity.kind != e.BUCKET:
        return ""
    locations = [str(x) for x in ctx.doctor.cluster_settings(ctx.cluster).checkpoints.locations]
    if any(x == f"s3://{entity.id}" or x.startswith(f"s3://{entity.id}/") for x in locations):
        return ""
    configured = ", ".join(locations) or "none"
    return (f"{entity.label} is not one of {ctx.cluster}'s checkpoint locations (checkpoints.locations: "
            f"{configured}), so only the path to S3 was checked")
