"""Tools beside the check families: ``check_resource`` (one named node, group, endpoint or bucket), and over
the package's libraries ``why_not`` (reachability), ``get_runbook`` (runbooks), ``propose_fix`` and
``apply_fix`` (remediation), through :class:`~fmdoctor.assistant.backends.Backends` (a tool whose function a
test's Backends leaves out is not offered).

``apply_fix`` is the one tool that changes an account. It is marked ``mutate``: the approval policy lets it
run only when the session holds an approval for exactly that plan digest, which only front-end code can
grant after a person said yes; the tool takes (consumes) the approval, and the remediation library checks
it once more.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from langchain.tools import ToolRuntime
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field

from fmdoctor.assistant.backends import Backends, to_plain
from fmdoctor.assistant.resource_tool import check_resource_tool, find_names_tool
from fmdoctor.assistant.results import ToolResult, ToolStatus
from fmdoctor.assistant.session import AssistantContext, PendingPlan
from fmdoctor.assistant.tools import MUTATE, OrNone, make_tool
from fmdoctor.engine.errors import UsageError

WHY_NOT, GET_RUNBOOK, PROPOSE_FIX, APPLY_FIX = "why_not", "get_runbook", "propose_fix", "apply_fix"
HEAD, ADMIN = "head", "admin"


class WhyNotArgs(BaseModel):
    source: str = Field(ADMIN, description="Instance id or Name tag, ENI id, IP, CIDR, 'internet', or 'admin' "
                        "(the admin CIDRs).")
    destination: str = Field(description="Instance id or Name tag, ENI id, IP, FSx id, S3 bucket, or 'head' "
                             "(the cluster's head node).")
    port: int | OrNone = Field(None, ge=0, le=65535, description="For tcp/udp only.")
    protocol: Literal["tcp", "udp", "icmp", "all", "efa"] = Field(
        "tcp", description="'efa': EFA traffic between two EFA nodes (all-traffic group rules, one zone and VPC).")


_AWS_ID = re.compile(r"^((i|eni|fs|sg|subnet|vpce?|pl)-[0-9a-f]+|internet|s3://.+|arn:.+)$")


def _is_address_or_id(name: str) -> bool:
    if _AWS_ID.match(name):
        return True
    try:
        ipaddress.ip_network(name, strict=False)
    except ValueError:
        return False
    return True


def _endpoint(ctx: AssistantContext, name: str) -> str:
    """Resolve the words people use ('head', 'admin', a Name tag) to what the reachability engine takes."""
    if name == ADMIN:
        cidrs = ctx.doctor.cluster_settings(ctx.cluster).network.admin_cidrs
        return cidrs[0] if cidrs else "internet"
    if _is_address_or_id(name):
        return name
    inventory = ctx.doctor.inventory(ctx.cluster)
    if name == HEAD:
        heads = inventory.head_nodes()
        if not heads:
            raise UsageError("the cluster has no known head node",
                             hint="tag it fmdoctor:role=head or list it under head_nodes in fmdoctor.yaml")
        return heads[0].id
    return next((i.id for i in inventory.instances if i.name == name), name)  # a Name tag, else as given


def _label(end: Any, fallback: str) -> str:
    """How the result names an end ('gpu-node-6 (i-0abc, eni-0def 10.0.16.4)'), else what was asked."""
    return str(end.get("label") or fallback) if isinstance(end, dict) else fallback


def why_not_tool(backends: Backends) -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], destination: str, port: int | None = None, source: str = ADMIN,
             protocol: str = "tcp") -> ToolResult:
        ctx = runtime.context
        src, dst = _endpoint(ctx, source), _endpoint(ctx, destination)
        result = to_plain(backends.why_not(ctx.doctor, ctx.cluster, src, dst, port, protocol=protocol))
        blocked = result.get("blocked_by") or {}
        shown = result.get("port") if result.get("port") is not None else port  # S3 and FSx imply their ports
        flow = protocol if shown is None else f"{protocol}/{shown}"
        src, dst = _label(result.get("source"), src), _label(result.get("destination"), dst)
        if result.get("reachable"):
            message = f"{flow} from {src} to {dst} is reachable"
        elif result.get("reachable") is None and not blocked:
            message = f"{flow} from {src} to {dst} could not be fully evaluated"
        else:
            message = (f"{flow} from {src} to {dst} is blocked by {blocked.get('component')} "
                       f"{blocked.get('resource')} ({blocked.get('code')})")
        return ToolResult(tool=WHY_NOT, status=ToolStatus.SUCCESS, message=message, data={"reachability": result})

    return make_tool(WHY_NOT, "Whether traffic can flow from source to destination, hop by hop (security groups, "
                     "NACLs, routes), and which rule blocks it.", WhyNotArgs, body)


class RunbookArgs(BaseModel):
    runbook_id: str = Field(description="A finding's runbook id.")
    finding_id: str | OrNone = Field(None, description="Fill it from this finding (check/resource).")


def runbook_tool(backends: Backends) -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], runbook_id: str, finding_id: str | None = None) -> ToolResult:
        ctx = runtime.context
        runbook = backends.get_runbook(runbook_id, settings=ctx.doctor.settings)
        finding = ctx.session.finding(finding_id) if finding_id else None
        if finding_id and finding is None:
            return ToolResult.error(GET_RUNBOOK, f"no finding {finding_id!r} in this conversation; run its check first")
        text = runbook.render(finding=finding, cluster=ctx.cluster, region=ctx.session.region() or "",
                              demo=ctx.doctor.demo)
        return ToolResult(tool=GET_RUNBOOK, status=ToolStatus.SUCCESS, message=f"runbook {runbook_id}",
                          data={"runbook_id": runbook_id, "finding_id": finding_id, "markdown": text})

    return make_tool(GET_RUNBOOK, "A runbook (meaning, confirm by hand, fix, verify), filled from a finding's "
                     "evidence when finding_id is given.", RunbookArgs, body)


class ProposeArgs(BaseModel):
    check_id: str = Field(description="The check whose finding to fix.")
    resource: str | OrNone = Field(None, description="The finding's resource (default: all of the check's).")


def propose_fix_tool(backends: Backends) -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], check_id: str, resource: str | None = None) -> ToolResult:
        ctx = runtime.context
        report = ctx.session.report_for(check_id)
        plan = backends.plan_fix(ctx.doctor, ctx.cluster, check_id, resource=resource, report=report)
        if getattr(plan, "empty", False):
            where = f" on {resource}" if resource else ""
            runbook = getattr(plan, "runbook", "") or check_id
            manual = getattr(plan, "manual", ()) or not getattr(plan, "automated", True)
            message = (f"no automated fix for {check_id}{where}: follow its runbook (get_runbook {runbook})"
                       if manual else f"nothing to fix for {check_id}{where}")
            return ToolResult(tool=PROPOSE_FIX, status=ToolStatus.NO_DATA, message=message,
                              data={"plan": to_plain(plan)})
        preflight = backends.preflight(ctx.doctor, plan) if backends.preflight else None
        pending = PendingPlan(plan=plan, digest=str(plan.digest), check_id=check_id, resource=resource,
                              preflight=preflight)
        ctx.session.plans[pending.digest] = pending
        return ToolResult(tool=PROPOSE_FIX, status=ToolStatus.APPROVAL_REQUIRED,
                          message=f"plan {pending.digest} needs a person's approval: call apply_fix with plan_digest "
                          f"{pending.digest!r}; the person is shown the exact calls and decides",
                          data=pending.to_json_dict())

    return make_tool(PROPOSE_FIX, "Plan the fix for a finding: the exact AWS API calls, with a dry-run preflight. "
                     "Changes nothing.", ProposeArgs, body)


class ApplyArgs(BaseModel):
    plan_digest: str = Field(description="The digest propose_fix returned.")


def apply_fix_tool(backends: Backends) -> BaseTool:
    def body(runtime: ToolRuntime[AssistantContext], plan_digest: str) -> ToolResult:
        ctx = runtime.context
        pending = ctx.session.plans.get(plan_digest)
        if pending is None:
            return ToolResult.error(APPLY_FIX, f"no plan {plan_digest!r} was proposed in this conversation; "
                                    "call propose_fix first")
        approval = ctx.session.take_approval(plan_digest)
        if approval is None:
            return ToolResult.error(APPLY_FIX, "not approved: nothing was changed", denied=True, digest=plan_digest)
        result: Any = backends.apply_fix(ctx.doctor, pending.plan, approval)
        del ctx.session.plans[plan_digest]
        data = to_plain(result)
        verified = _verified(result, data)
        outcome = {True: "verified: the finding is gone", False: "not verified: the finding is still there",
                   None: "verification unknown"}[verified]
        return ToolResult(tool=APPLY_FIX, status=ToolStatus.ERROR if verified is False else ToolStatus.SUCCESS,
                          message=f"applied plan {plan_digest}; {outcome}",
                          data={"digest": plan_digest, "check_id": pending.check_id, "resource": pending.resource,
                                "result": data})

    return make_tool(APPLY_FIX, "Apply a proposed fix plan; a person must approve it first.", ApplyArgs, body,
                     access=MUTATE)


def _verified(result: Any, data: Any) -> bool | None:
    """FixResult.ok (applied and verified), else its ``verified``, else the same keys in its JSON."""
    for key in ("ok", "verified"):
        value = getattr(result, key, None)
        if isinstance(value, bool):
            return value
        if isinstance(data, dict) and isinstance(data.get(key), bool):
            return data[key]
    return None


def extra_tools(backends: Backends) -> list[BaseTool]:
    tools = [find_names_tool(), check_resource_tool()]
    if backends.why_not:
        tools.append(why_not_tool(backends))
    if backends.get_runbook:
        tools.append(runbook_tool(backends))
    if backends.remediation:
        tools += [propose_fix_tool(backends), apply_fix_tool(backends)]
    return tools
