"""Node changes through the scheduler (drain/resume a Slurm node, cordon/uncordon a Kubernetes node), each
read back from the scheduler afterwards: the change counts as applied only when the scheduler shows it.

Called by :mod:`fmdoctor.remediation.apply` for an approved plan only; values go to ``scontrol`` as argv items,
to slurmrestd and the Kubernetes API as JSON, never through a shell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fmdoctor.config import SchedulerSettings
from fmdoctor.scheduler import slurm
from fmdoctor.scheduler.model import KUBERNETES, SLURM, SchedulerNode, SchedulerUnavailable, SchedulerView

APPLIED, ALREADY, FAILED = "applied", "already-present", "failed"


@dataclass(frozen=True)
class ChangeResult:
    status: str
    detail: str
    code: str | None = None


def _slurm_view(settings: SchedulerSettings) -> SchedulerView:
    if settings.slurm.via == "slurmrestd":
        assert settings.slurm.url is not None
        return _rest(settings).read()
    return slurm.read_local()


def _rest(settings: SchedulerSettings) -> slurm.RestSlurm:
    assert settings.slurm.url is not None
    return slurm.RestSlurm(settings.slurm.url, slurm.token_from_env(settings.slurm.token_env), settings.slurm.user)


def _slurm_done(node: SchedulerNode, state: str, reason: str | None) -> bool:
    if state == "DRAIN":
        return "DRAIN" in node.states and (reason is None or node.reason == reason)
    return not node.has("DRAIN")


def _describe(node: SchedulerNode) -> str:
    return f"{'+'.join(sorted(node.states))}" + (f' "{node.reason}"' if node.reason else "")


def change_slurm_node(settings: SchedulerSettings, params: Mapping[str, Any],
                      runner: Callable[[list[str]], str] = lambda argv: slurm.run_command(argv)) -> ChangeResult:
    name, state, reason = str(params["NodeName"]), str(params["State"]), params.get("Reason")
    before = _slurm_view(settings).node(name)
    if before is None:
        return ChangeResult(FAILED, f"Slurm has no node {name}", "NoSuchNode")
    if _slurm_done(before, state, reason):
        return ChangeResult(ALREADY, f"Slurm already shows {name} {_describe(before)}")
    if settings.slurm.via == "slurmrestd":
        _rest(settings).update(name, state, reason)
    else:
        runner(slurm.update_argv(name, state, reason))
    after = _slurm_view(settings).node(name)
    if after is None or not _slurm_done(after, state, reason):
        shown = _describe(after) if after else "no such node"
        return ChangeResult(FAILED, f"read back {name}: {shown}, not {state}", "NotApplied")
    return ChangeResult(APPLIED, f"read back from Slurm: {name} is {_describe(after)}")


def change_k8s_node(settings: SchedulerSettings, params: Mapping[str, Any], api: Any = None) -> ChangeResult:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from fmdoctor.scheduler.kubernetes import REQUEST_TIMEOUT_S, api_client

    name, wanted = str(params["name"]), bool(params["unschedulable"])
    core: Any = client.CoreV1Api(api or api_client(settings.kubernetes.context, settings.kubernetes.kubeconfig))
    try:
        before = core.read_node(name, _request_timeout=REQUEST_TIMEOUT_S)
        if bool(before.spec.unschedulable) == wanted:
            return ChangeResult(ALREADY, f"Kubernetes already shows {name} {'cordoned' if wanted else 'schedulable'}")
        core.patch_node(name, {"spec": {"unschedulable": wanted}}, _request_timeout=REQUEST_TIMEOUT_S)
        after = core.read_node(name, _request_timeout=REQUEST_TIMEOUT_S)
    except ApiException as exc:
        code = {401: "AccessDenied", 403: "AccessDenied", 404: "NotFound"}.get(exc.status, "KubernetesApiFailed")
        return ChangeResult(FAILED, f"{exc.status} {exc.reason}: patch nodes needs get/patch on nodes", code)
    if bool(after.spec.unschedulable) != wanted:
        return ChangeResult(FAILED, f"read back {name}: unschedulable={after.spec.unschedulable}", "NotApplied")
    return ChangeResult(APPLIED, f"read back from Kubernetes: {name} unschedulable={bool(after.spec.unschedulable)}")


def change_node(settings: SchedulerSettings, service: str, params: Mapping[str, Any]) -> ChangeResult:
    """Apply one scheduler call of a plan and read it back; SchedulerUnavailable becomes a failed result."""
    try:
        if service == SLURM:
            return change_slurm_node(settings, params)
        if service == KUBERNETES:
            return change_k8s_node(settings, params)
    except SchedulerUnavailable as exc:
        return ChangeResult(FAILED, f"{exc.message} ({exc.grant})", exc.code)
    except ValueError as exc:
        return ChangeResult(FAILED, str(exc), "InvalidValue")
    return ChangeResult(FAILED, f"no scheduler service {service!r}", "UnknownService")
