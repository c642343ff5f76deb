"""``check_resource``: a question about one node, security group, endpoint, HyperPod instance group, bucket,
file system or the training job, answered about it. The tool resolves the name
(:func:`fmdoctor.engine.entities.find_entity`: a Name tag, an id, an IP, an endpoint, ``s3://bucket``), runs
every check that can concern that kind of thing (their ``concerns``; of the ones asked for, those that concern
it) and returns only the findings on it or involving it, and what could not be verified about it. An unknown
name is an error result that says what was tried and what is close, never an answer about something else.

``find_names``: the things of the cluster a sentence names, looked up in its inventory
(:func:`fmdoctor.engine.entities.mentioned`), so the planner recognises 'demo-llm-chat' by its being an
endpoint of the cluster, not by the shape of the word.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from fmdoctor.assistant.digest import grouping_of
from fmdoctor.assistant.results import ToolResult, ToolStatus
from fmdoctor.assistant.session import AssistantContext
from fmdoctor.assistant.tools import make_tool, run_checks_result
from fmdoctor.engine import entities as e
from fmdoctor.engine.errors import FmdoctorError, TargetNotFound
from fmdoctor.engine.incidents import build_incidents
from fmdoctor.engine.model import Finding
from fmdoctor.words import plural

log = logging.getLogger(__name__)

CHECK_RESOURCE, FIND_NAMES = "check_resource", "find_names"


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
            entity = e.find_entity(inventory, resource, known_names(ctx))
        except TargetNotFound as exc:
            message = exc.message + (f"; {exc.hint}" if exc.hint else "")
            return ToolResult.error(CHECK_RESOURCE, message, unknown=resource, cluster=ctx.cluster)
        cluster_checks = ctx.doctor.registry.select(None)
        note = _note(ctx, entity)
        concerning = list(e.BUCKET_CHECKS) if note else e.checks_for(entity, cluster_checks)
        # of the checks the question's topic asks for, those that can concern this thing ('slow' about an
        # endpoint is its latency, errors, saturation and scaling, not training); none: all that concern it
        wanted = [c for c in checks or () if c in concerning] or concerning
        result = run_checks_result(ctx, CHECK_RESOURCE, wanted, runtime.stream_writer)
        via = [c.id for c in cluster_checks if entity.kind == e.JOB and e.JOB in c.concerns]
        return scoped(result, entity, e.other_tokens(inventory, entity), note, via)

    return make_tool(CHECK_RESOURCE, "Answer a question about one node, security group, SageMaker endpoint, HyperPod "
                     "instance group or S3 bucket: resolves the name, runs the checks that concern it and returns only "
                     "the findings on it or involving it (use it whenever the question names one).",
                     CheckResourceArgs, body)


def scoped(result: ToolResult, entity: e.Entity, others: list[str], note: str = "",
           via: list[str] | None = None, node_of: Callable[[str], str | None] | None = None) -> ToolResult:
    """The run's result cut down to the entity: findings on it first, then those involving it, and the incidents
    (:mod:`fmdoctor.engine.incidents`) any of whose findings is on it or involves it, most urgent first."""
    related = [(e.relation(entity, f, via or ()), f) for f in result.findings]
    incidents = _incidents(result, {f["id"] for how, f in related if how}, node_of)
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
                            "involves": [f["id"] for f in involved], "note": note, "incidents": incidents,
                            "other_findings": len(result.findings) - count})


def _incidents(result: ToolResult, related: set[str],
               node_of: Callable[[str], str | None] | None = None) -> list[dict]:
    """The run's incidents that hold a finding about the entity, most urgent first, each with ``when`` (how soon,
    in words) and ``first_step`` (the fix command or the runbook); grouped through the run's own node identities
    (the result's ``nodes``) unless ``node_of`` is given."""
    now = datetime.now(UTC)
    findings = [Finding.model_validate(f) for f in result.findings]
    grouping = grouping_of([result])
    incidents = build_incidents(findings, now=now, cluster=result.data.get("cluster"),
                                region=result.data.get("region"), node_of=node_of or grouping["nodes"].get,
                                demo=grouping["demo"])
    return [{**i.to_json_dict(), "when": i.when(now), "first_step": i.next_words()} for i in incidents
            if any(m.id in related for m in i.members)]


def _note(ctx: AssistantContext, entity: e.Entity) -> str:
    if entity.kind != e.BUCKET:
        return ""
    locations = [str(x) for x in ctx.doctor.cluster_settings(ctx.cluster).checkpoints.locations]
    if any(x == f"s3://{entity.id}" or x.startswith(f"s3://{entity.id}/") for x in locations):
        return ""
    configured = ", ".join(locations) or "none"
    return (f"{entity.label} is not one of {ctx.cluster}'s checkpoint locations (checkpoints.locations: "
            f"{configured}), so only the path to S3 was checked")


class FindNamesArgs(BaseModel):
    text: str = Field(description="The question, as asked.")


def find_names_tool() -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], text: str) -> ToolResult:
        ctx = runtime.context
        inventory, known = ctx.doctor.inventory(ctx.cluster), known_names(ctx)
        found = e.mentioned(inventory, text, known)
        names = [{"text": word, **entity.to_json_dict()} for word, entity in found]
        said = [*(word for word, _ in found), *ctx.own_clusters()]  # this cluster's own names are no typos
        close = [{"text": word, "close": names_} for word, names_ in
                 e.near_misses(inventory, text, known, found=said).items()]
        message = (f"names {', '.join(n['label'] for n in names)}" if names else
                   f"names nothing of {ctx.cluster}")
        return ToolResult(tool=FIND_NAMES, status=ToolStatus.SUCCESS, message=message,
                          data={"names": names, "close": close, "cluster": ctx.cluster})

    return make_tool(FIND_NAMES, "Which nodes, endpoints, security groups, buckets, file systems or jobs of the "
                     "cluster a question names (looked up in its inventory); then ask check_resource about each.",
                     FindNamesArgs, body)


def known_names(ctx: AssistantContext) -> e.Known:
    """The names of the cluster's settings (checkpoint locations) and its FSx file systems; a file system list
    AWS would not give is left out (the lookup then says it knows none)."""
    settings = ctx.doctor.cluster_settings(ctx.cluster)
    locations = tuple(str(x) for x in settings.checkpoints.locations)
    systems: dict[str, str] = {}
    try:
        fsx = ctx.doctor.connect(settings).client("fsx")
        for page in fsx.get_paginator("describe_file_systems").paginate():
            for raw in page.get("FileSystems", []):
                tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}
                systems[raw["FileSystemId"]] = tags.get("Name", "")
    except FmdoctorError:
        raise
    except Exception:  # denied, throttled, unreachable: names of file systems are then not known
        log.debug("file systems could not be listed", exc_info=True)
    return e.Known(locations, systems)
