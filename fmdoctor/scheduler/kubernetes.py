"""Kubernetes as a source, through the official ``kubernetes`` client: nodes, device plugins, pods.

Reads node conditions (https://kubernetes.io/docs/reference/node/node-status/#condition), capacity vs
allocatable of the extended resources the device plugins advertise (``nvidia.com/gpu``,
``aws.amazon.com/neuron*``, ``vpc.amazonaws.com/efa``; https://kubernetes.io/docs/concepts/extend-kubernetes/
compute-storage-net/device-plugins/), taints, HyperPod's ``sagemaker.amazonaws.com/node-health-status`` label
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-node-labels.html), the
device-plugin pods, and the pods on each node. Needs get/list on nodes and pods (a ClusterRole with
``nodes`` and ``pods``: get, list); cordon/drain also patch nodes and create ``pods/eviction``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fmdoctor.scheduler.model import KUBERNETES, SchedulerJob, SchedulerNode, SchedulerUnavailable, SchedulerView

DEVICE_RESOURCES = re.compile(r"^(nvidia\.com/gpu|aws\.amazon\.com/neuron(core|device)?|vpc\.amazonaws\.com/efa)$")
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
# The DaemonSets the device plugins install: NVIDIA's k8s-device-plugin (and the GPU operator's), the EFA
# plugin of aws-efa-k8s-device-plugin (EKS charts), and the Neuron device plugin. A Helm chart names them
# release-chart unless the release already holds the chart's name (NVIDIA's README: ``helm upgrade -i nvdp
# nvdp/nvidia-device-plugin`` gives pods ``nvdp-nvidia-device-plugin-*``), so the name may have a prefix.
PLUGIN_PODS = re.compile(r"(?:^|-)(nvidia-device-plugin|aws-efa-k8s-device-plugin|neuron-device-plugin)")


def plugin_of(pod_name: str) -> str | None:
    """The device plugin a pod of that name runs (``nvdp-nvidia-device-plugin-x7k2p`` -> nvidia-device-plugin)."""
    match = PLUGIN_PODS.search(pod_name or "")
    return match.group(1) if match else None
PLUGIN_FOR = {"nvidia.com/gpu": "nvidia-device-plugin", "vpc.amazonaws.com/efa": "aws-efa-k8s-device-plugin",
              "aws.amazon.com/neuron": "neuron-device-plugin", "aws.amazon.com/neuroncore": "neuron-device-plugin",
              "aws.amazon.com/neurondevice": "neuron-device-plugin"}
# Taints an autoscaler or interruption handler puts on a node it is taking away, instead of (or before)
# setting spec.unschedulable: Karpenter v1 karpenter.sh/disrupted and v0.32-v0.37 karpenter.sh/disruption
# (https://karpenter.sh/docs/concepts/disruption/, Control Flow), cluster-autoscaler's
# ToBeDeletedByClusterAutoscaler (its FAQ), aws-node-termination-handler's aws-node-termination-handler/*
# (its README, TAINT_NODE). A node carrying one with effect NoSchedule/NoExecute gets state DISRUPTING: nothing
# new is placed there, so it is no "still schedulable" node. Not any NoSchedule taint: GPU pools carry
# nvidia.com/gpu:NoSchedule that GPU pods tolerate.
DISRUPTION_TAINTS = ("karpenter.sh/disrupted", "karpenter.sh/disruption", "ToBeDeletedByClusterAutoscaler",
                     "aws-node-termination-handler/")
REQUEST_TIMEOUT_S = 20
GRANT = ("give fmdoctor a kubeconfig context (scheduler.kubernetes.context; for EKS: aws eks update-kubeconfig "
         "--name CLUSTER) whose identity may get/list nodes and pods cluster-wide, or run it in-cluster with such "
         "a service account")
_INSTANCE_IN_PROVIDER = re.compile(r"^aws:///[^/]*/(i-[0-9a-f]{8,17})$")


def instance_of_provider_id(provider_id: str | None) -> str | None:
    """``aws:///us-west-2a/i-0abc...`` -> ``i-0abc...`` (the AWS cloud provider's spec.providerID)."""
    match = _INSTANCE_IN_PROVIDER.match(provider_id or "")
    return match.group(1) if match else None


def _count(value: Any) -> int:
    from kubernetes import utils

    parse_quantity: Any = utils.parse_quantity  # untyped in the client
    try:
        return int(parse_quantity(str(value)))
    except (ValueError, TypeError, ArithmeticError):
        return 0


def _devices(resources: Mapping[str, Any] | None) -> dict[str, int]:
    return {k: _count(v) for k, v in (resources or {}).items() if DEVICE_RESOURCES.match(k)}


def parse_node(node: Any) -> SchedulerNode:
    meta, spec, status = node.metadata, node.spec, node.status
    conditions = {c.type: c.status for c in (status.conditions or ())}
    ready = conditions.get("Ready")
    states = {"READY" if ready == "True" else "NOTREADY" if ready == "False" else "UNKNOWN"}
    if spec.unschedulable:
        states.add("CORDONED")
    if any(t.key.startswith(DISRUPTION_TAINTS) and t.effect in ("NoSchedule", "NoExecute") for t in spec.taints or ()):
        states.add("DISRUPTING")
    reason = ""
    for c in status.conditions or ():
        if c.type == "Ready" and c.status != "True":
            reason = f"{c.reason or ''}: {c.message or ''}".strip(": ")
    addresses = tuple(a.address for a in (status.addresses or ()) if a.type in ("InternalIP", "Hostname",
                                                                                   "InternalDNS"))
    taints = tuple(f"{t.key}={t.value or ''}:{t.effect}" for t in (spec.taints or ()))
    return SchedulerNode(
        name=meta.name, states=frozenset(states), reason=reason, addresses=addresses, provider_id=spec.provider_id,
        configured=_devices(status.capacity), allocatable=_devices(status.allocatable), conditions=conditions,
        taints=taints, labels=dict(meta.labels or {}))


def _owner(pod: Any) -> str:
    refs = pod.metadata.owner_references or ()
    return f"{refs[0].kind}/{refs[0].name}" if refs else f"Pod/{pod.metadata.name}"


def _requests(pod: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for container in pod.spec.containers or ():
        requests = (container.resources.requests or {}) if container.resources else {}
        limits = (container.resources.limits or {}) if container.resources else {}
        for key, value in {**limits, **requests}.items():
            if DEVICE_RESOURCES.match(key):
                out[key] = str(value)
    return out


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or ()))


def _job(pod: Any, now: datetime, state: str) -> SchedulerJob:
    started = pod.status.start_time
    elapsed = int((now - started).total_seconds()) if isinstance(started, datetime) else None
    return SchedulerJob(id=f"{pod.metadata.namespace}/{pod.metadata.name}", name=pod.metadata.name, user=_owner(pod),
                        nodes=(pod.spec.node_name,) if pod.spec.node_name else (), state=state,
                        elapsed_s=elapsed, namespace=pod.metadata.namespace, requests=_requests(pod))


def _unschedulable(pod: Any) -> str | None:
    """Why the scheduler could not place the pod (PodScheduled False, reason Unschedulable); None for a pod not
    tried yet or held on purpose (reason SchedulingGated: spec.schedulingGates, e.g. Kueue's admission gate,
    https://kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness/)."""
    for c in pod.status.conditions or ():
        if c.type == "PodScheduled" and c.status == "False" and (c.reason or "Unschedulable") == "Unschedulable":
            return f"Unschedulable: {c.message or ''}".strip(": ")
    return None


def require_client() -> None:
    """The official client comes with the [kubernetes] extra: without it the scheduler cannot be read (nor a node
    cordoned), and that is said with what to install, not as a crash of every Kubernetes check."""
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise SchedulerUnavailable("the Kubernetes client is not installed", "pip install 'fmdoctor[kubernetes]'",
                                   "MissingExtra") from None


def api_client(context: str | None = None, kubeconfig: str | None = None) -> Any:
    """An ApiClient for the kubeconfig context (or in-cluster when no kubeconfig is found and none was named)."""
    require_client()
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    load_kube_config: Any = config.load_kube_config  # untyped in the client
    load_incluster_config: Any = config.load_incluster_config
    try:
        load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    except (ConfigException, OSError, TypeError) as exc:
        if context or kubeconfig:
            raise SchedulerUnavailable(f"kubeconfig: {exc}", GRANT, "NoKubeconfig") from None
        try:
            load_incluster_config(client_configuration=configuration)
        except ConfigException:
            raise SchedulerUnavailable(f"no kubeconfig and not in a cluster: {exc}", GRANT, "NoKubeconfig") from None
    return client.ApiClient(configuration)


def _list(api: Any, path: str, kind: str) -> list[Any]:
    """The items of a cluster-wide list (``GET /api/v1/nodes``) as the client's models, asked as CoreV1Api's
    ``list_node``/``list_pod_for_all_namespaces`` ask (the bearer token, JSON, the same timeout) through the
    ApiClient's own steps, without importing CoreV1Api: its module holds all of core/v1's operations, a quarter
    of a second to import for two GETs. Raises the client's ApiException for an answer outside 2xx."""
    request = api.param_serialize(method="GET", resource_path=path, header_params={"Accept": "application/json"},
                                  auth_settings=["BearerToken"])
    response = api.call_api(*request, _request_timeout=REQUEST_TIMEOUT_S)
    response.read()
    return list(api.response_deserialize(response_data=response, response_types_map={"200": kind}).data.items)


def read(api: Any, source: str, now: datetime | None = None) -> SchedulerView:
    """Nodes and pods through ``api`` (an ApiClient)."""
    from kubernetes.client.exceptions import ApiException

    now = now or datetime.now(UTC)
    try:
        nodes: list[Any] = _list(api, "/api/v1/nodes", "V1NodeList")
    except ApiException as exc:
        code = "AccessDenied" if exc.status in (401, 403) else "KubernetesApiFailed"
        raise SchedulerUnavailable(f"list nodes: {exc.status} {exc.reason}", GRANT, code) from None
    except Exception as exc:  # urllib3 connection errors and the like: the API is not reachable
        raise SchedulerUnavailable(f"list nodes: {exc}", GRANT, "KubernetesUnreachable") from None
    gaps: list[str] = []
    running: list[SchedulerJob] = []
    pending: list[SchedulerJob] = []
    plugins: list[SchedulerJob] = []
    try:
        pods: list[Any] = _list(api, "/api/v1/pods", "V1PodList")
    except ApiException as exc:
        gaps.append(f"pods: list pods cluster-wide: {exc.status} {exc.reason} ({GRANT})")
        pods = []
    for pod in pods:
        phase = pod.status.phase or "Unknown"
        if plugin_of(pod.metadata.name or ""):
            plugins.append(_job(pod, now, "ready" if _ready(pod) and phase == "Running" else f"not-ready ({phase})"))
        elif phase == "Pending" and not pod.spec.node_name:
            why = _unschedulable(pod)
            if why is not None:
                pending.append(_job(pod, now, why))
        elif phase in ("Running", "Pending") and pod.spec.node_name:
            running.append(_job(pod, now, phase))
    return SchedulerView(KUBERNETES, source, tuple(parse_node(n) for n in nodes), tuple(running), tuple(pending),
                         tuple(plugins), gaps=tuple(gaps))
