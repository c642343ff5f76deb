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
    from fmdoctor.scheduler.kubernetes import REQUEST_TIMEOUT_S, api_client, require_client

    require_client()
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    name, wanted, evict = str(params["name"]), bool(params["unschedulable"]), bool(params.get("evict"))
    core: Any = client.CoreV1Api(api or api_client(settings.kubernetes.context, settings.kubernetes.kubeconfig))
    try:
        before = core.read_node(name, _request_timeout=REQUEST_TIMEOUT_S)
        evictable = _evictable(core, name) if evict else []
        if bool(before.spec.unschedulable) == wanted and not evictable:
            return ChangeResult(ALREADY, f"Kubernetes already shows {name} {'cordoned' if wanted else 'schedulable'}")
        if bool(before.spec.unschedulable) != wanted:
            core.patch_node(name, {"spec": {"unschedulable": wanted}}, _request_timeout=REQUEST_TIMEOUT_S)
        for pod in evictable:  # the Eviction API honours PodDisruptionBudgets, as kubectl drain does
            body = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace}}
            core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body,
                                                _request_timeout=REQUEST_TIMEOUT_S)
        after = core.read_node(name, _request_timeout=REQUEST_TIMEOUT_S)
        left = [f"{p.metadata.namespace}/{p.metadata.name}" for p in _evictable(core, name)] if evict else []
    except ApiException as exc:
        code = {401: "AccessDenied", 403: "AccessDenied", 404: "NotFound", 429: "DisruptionBudget"}.get(
            exc.status, "KubernetesApiFailed")
        return ChangeResult(FAILED, f"{exc.status} {exc.reason}: needs get/patch on nodes"
                            + (", list pods and create pods/eviction" if evict else ""), code)
    if bool(after.spec.unschedulable) != wanted:
        return ChangeResult(FAILED, f"read back {name}: unschedulable={after.spec.unschedulable}", "NotApplied")
    if left:
        return ChangeResult(FAILED, f"read back {name}: cordoned, pods still on it: {', '.join(left[:10])}",
                            "NotDrained")
    drained = f", {len(evictable)} pod(s) evicted" if evict else ""
    return ChangeResult(APPLIED, f"read back from Kubernetes: {name} unschedulable={bool(after.spec.unschedulable)}"
                        + drained)


def _evictable(core: Any, node: str) -> list[Any]:
    """The node's pods a drain evicts: not DaemonSet pods (their controller ignores unschedulable), not mirror
    (static) pods, not already finished, not already being deleted (an evicted pod terminates within its grace
    period, and is listed until it has)."""
    from fmdoctor.scheduler.kubernetes import REQUEST_TIMEOUT_S

    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                            _request_timeout=REQUEST_TIMEOUT_S).items
    out = []
    for pod in pods:
        owners = pod.metadata.owner_references or ()
        annotations = pod.metadata.annotations or {}
        if any(o.kind == "DaemonSet" for o in owners) or "kubernetes.io/config.mirror" in annotations:
            continue
        if (pod.status.phase or "") in ("Succeeded", "Failed") or pod.metadata.deletion_timestamp is not None:
            continue
        out.append(pod)
    return out


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
