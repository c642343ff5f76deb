"""Which metric sources a run reads (``metrics.source``), and one :class:`ClusterMetrics` from all of them.

* ``cloudwatch``: CloudWatch only (the CloudWatch agent, Container Insights, neuron-monitor).
* ``prometheus``: the Prometheus API at ``metrics.url`` only (``--metrics-url`` sets both).
* ``auto`` (the default): CloudWatch first; the nodes it has no GPU series for, and the EFA-capable nodes
  it has no EFA counters for, are then looked up in Prometheus: ``metrics.url`` when set, else the Amazon
  Managed Service for Prometheus workspace that the SageMaker HyperPod observability EKS add-on
  (``amazon-sagemaker-hyperpod-observability``) writes to, read from the add-on's configuration
  (``ampWorkspace.prometheusEndpoint``, else the URL of ``ampWorkspace.arn``, as an ``AWS::EKS::Addon``'s
  configurationValues set them) with ``eks:DescribeAddon``. A Slurm-orchestrated HyperPod cluster has no such
  add-on: its ``sagemaker-observability`` cluster extension is found with ``sagemaker:ListClusterExtensions`` and
  read with ``sagemaker:DescribeClusterExtension``, whose ``ConfigurationValues`` hold the whole stored
  configuration (SageMaker developer guide, "Observability extension configuration": HyperPod writes every
  default into it). Its ``prometheus.remoteWriteUrl`` (``.../workspaces/ws-.../api/v1/remote_write``) names the
  AMP workspace, queried at that URL less ``api/v1/remote_write``; without ``prometheus`` the extension sends its
  metrics to Amazon CloudWatch, and nodes CloudWatch has no series for under the ``gpu.*`` names stay not
  verified, saying so.

A node no source could be asked about (a HyperPod node, with no Prometheus configured or discoverable and no
CloudWatch series) is *unseen*: the checks report it as not verified, with what to configure.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.config import ClusterSettings
from fmdoctor.durations import format_duration
from fmdoctor.engine.errors import AwsFailure, ConfigError, describe_aws_failure
from fmdoctor.engine.hyperpod import HyperPodCluster
from fmdoctor.metrics.cluster import node_metrics, points_by_node
from fmdoctor.metrics.dcgm import EFA_ERROR_COUNTERS, PromResult, describe_metric, sweep
from fmdoctor.metrics.identity import NodeIndex
from fmdoctor.metrics.model import ClusterMetrics, NodeMetrics, periods_in
from fmdoctor.metrics.prometheus import BEARER, NONE, SIGV4, Endpoint, PrometheusClient, amp_region, base_url
from fmdoctor.metrics.targets import MetricNode

OBSERVABILITY_ADDON = "amazon-sagemaker-hyperpod-observability"
OBSERVABILITY_EXTENSION = "sagemaker-observability"
REMOTE_WRITE = "api/v1/remote_write"
CONFIGURE = ("set metrics.url to the Prometheus API its DCGM and EFA exporters write to (for Amazon Managed "
             "Service for Prometheus the workspace URL, with auth: sigv4), or pass --metrics-url")


@dataclass(frozen=True)
class Sources:
    cloudwatch: bool
    prometheus: Endpoint | None = None
    origin: str = ""  # why this Prometheus: "metrics.url", or the add-on it was found in
    note: str = ""  # why none was found, when none was


def endpoint(url: str, auth: str | None, token_env: str | None, credentials: Any, region: str | None) -> Endpoint:
    url = base_url(url)
    mode = auth or (SIGV4 if amp_region(url) else NONE)
    token = None
    if mode == BEARER:
        token = os.environ.get(token_env or "")
        if not token:
            raise ConfigError(f"metrics.auth is bearer but the environment variable {token_env!r} is not set")
    return Endpoint(url, mode, token, credentials if mode == SIGV4 else None, amp_region(url) or region)


def plan_sources(settings: ClusterSettings, hyperpod: HyperPodCluster | None, eks: Callable[[], Any] | None,
                 credentials: Callable[[], Any], region: str, sagemaker: Callable[[], Any] | None = None) -> Sources:
    metrics = settings.metrics
    cloudwatch = metrics.source != "prometheus"
    if metrics.url:
        return Sources(cloudwatch, endpoint(metrics.url, metrics.auth, metrics.token_env, credentials(), region),
                       "metrics.url")
    if metrics.source == "cloudwatch" or hyperpod is None:
        return Sources(cloudwatch)
    if hyperpod.eks_cluster_arn:  # the add-on writes to AMP only
        url, note = observability_workspace(eks, hyperpod)
        auth, origin = SIGV4, f"the {OBSERVABILITY_ADDON} add-on of EKS cluster {_eks_name(hyperpod)}"
    else:  # SigV4 when the remote-write URL is an AMP workspace's
        url, note = extension_workspace(sagemaker, hyperpod)
        auth, origin = None, f"the {OBSERVABILITY_EXTENSION} extension of HyperPod cluster {hyperpod.name}"
    if url is None:
        return Sources(cloudwatch, note=note)
    return Sources(cloudwatch, endpoint(url, auth, None, credentials(), region), origin)


def extension_workspace(sagemaker: Callable[[], Any] | None, hyperpod: HyperPodCluster) -> tuple[str | None, str]:
    """The AMP workspace a Slurm HyperPod cluster's sagemaker-observability extension writes to, or None and why."""
    where = f"HyperPod cluster {hyperpod.name} is {hyperpod.orchestrator or 'Slurm'}-orchestrated"
    if sagemaker is None or not hyperpod.arn:
        return None, f"{where}: its {OBSERVABILITY_EXTENSION} extension was not looked up"
    try:
        client = sagemaker()
        found = None
        for page in client.get_paginator("list_cluster_extensions").paginate(ClusterArn=hyperpod.arn):
            found = next((e for e in page.get("Extensions", []) if e.get("ExtensionName") == OBSERVABILITY_EXTENSION),
                         None)
            if found is not None:
                break
        if found is None:
            return None, f"{where} and has no {OBSERVABILITY_EXTENSION} extension to find a workspace in"
        details = client.describe_cluster_extension(ClusterArn=hyperpod.arn, ExtensionArn=found["ExtensionArn"])
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        return None, f"{where}: its {OBSERVABILITY_EXTENSION} extension could not be read ({_said(failure)})"
    try:
        configured = json.loads((details.get("ExtensionDetails") or {}).get("ConfigurationValues") or "{}")
        remote = (configured.get("prometheus") or {}).get("remoteWriteUrl")
    except (ValueError, TypeError, AttributeError):
        remote = None
    if not remote:
        return None, (f"{where}: its {OBSERVABILITY_EXTENSION} extension sends metrics to Amazon CloudWatch (its "
                      "configuration has no prometheus.remoteWriteUrl), not to a Prometheus workspace")
    url = str(remote).rstrip("/")
    if not url.endswith("/" + REMOTE_WRITE):
        return None, (f"{where}: its {OBSERVABILITY_EXTENSION} extension writes to {url[:200]}, which is not a "
                      f"Prometheus remote-write URL (.../{REMOTE_WRITE})")
    return url.removesuffix(REMOTE_WRITE), ""


def observability_workspace(eks: Callable[[], Any] | None, hyperpod: HyperPodCluster) -> tuple[str | None, str]:
    """The AMP workspace URL the HyperPod observability add-on writes to, or None and why."""
    if not hyperpod.eks_cluster_arn or eks is None:
        return None, (f"HyperPod cluster {hyperpod.name} is {hyperpod.orchestrator or 'Slurm'}-orchestrated: it has "
                      "no EKS observability add-on to find a workspace in")
    name = _eks_name(hyperpod)
    try:
        raw = eks().describe_addon(clusterName=name, addonName=OBSERVABILITY_ADDON)
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        if failure.kind == "not-found" or "NotFound" in failure.code:
            return None, f"EKS cluster {name} has no {OBSERVABILITY_ADDON} add-on"
        return None, f"the {OBSERVABILITY_ADDON} add-on of EKS cluster {name} could not be read ({_said(failure)})"
    try:
        workspace = json.loads((raw.get("addon") or {}).get("configurationValues") or "{}")["ampWorkspace"]
        url = workspace.get("prometheusEndpoint") or _workspace_url(workspace["arn"])
    except (ValueError, KeyError, TypeError, AttributeError):
        url = None
    if not url:
        return None, f"the {OBSERVABILITY_ADDON} add-on of EKS cluster {name} names no ampWorkspace"
    return str(url), ""


def _workspace_url(arn: str) -> str | None:
    """arn:aws:aps:<region>:<account>:workspace/<id> -> its query URL (the AMP user guide's
    https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/)."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "aps" or not parts[5].startswith("workspace/"):
        return None
    return f"https://aps-workspaces.{parts[3]}.amazonaws.com/workspaces/{parts[5].removeprefix('workspace/')}/"


def _eks_name(hyperpod: HyperPodCluster) -> str:
    return (hyperpod.eks_cluster_arn or "").rsplit("/", 1)[-1]


def _said(failure: AwsFailure) -> str:
    return f"{failure.code}" + (f" on {failure.iam_action}" if failure.iam_action else "")


def count_calls(aws: Any, queries: Any) -> Callable[[str, str], None]:
    """A Prometheus client's counter: AMP's calls are AWS API calls (``stats.api_calls``, through ``aws.calls``), a
    plain Prometheus's are queries (``stats.queries``)."""

    def count(service: str, operation: str) -> None:
        if service == "prometheus":
            queries.record(service, operation)
        elif aws is not None:
            aws.calls.record(service, operation)

    return count


def load_metrics(nodes: Sequence[MetricNode], sources: Sources, cloudwatch: Callable[[], ClusterMetrics] | None,
                 client: PrometheusClient | None, settings: ClusterSettings, now: datetime,
                 efa_nodes: Sequence[str] = ()) -> ClusterMetrics:
    """CloudWatch's snapshot (when it is a source), completed from Prometheus for what it lacks."""
    gpu = settings.gpu
    start, end = now - gpu.window, now
    if sources.cloudwatch and cloudwatch is not None:
        metrics = cloudwatch()
    else:
        metrics = ClusterMetrics(start, end, gpu.period, {n.id: _empty(n, start, end, settings) for n in nodes}, {}, {})
    lacking = [n for n in nodes if not metrics.nodes[n.id].publishes]
    with_counters = {c.instance_id for c in metrics.efa.values()}
    efa_lacking = [n for n in efa_nodes if n not in with_counters]
    if client is None or sources.prometheus is None:
        unseen = {n.id: _unseen(n, sources) for n in lacking if n.hyperpod}
        return replace(metrics, unseen=unseen)
    try:
        found = sweep(client, NodeIndex(n.identity for n in nodes), start, end, gpu.period, bool(efa_lacking))
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None or not sources.cloudwatch:
            raise
        return replace(metrics, unreadable={n.id: failure for n in lacking})
    periods = periods_in(start, end, gpu.period)
    where = describe_metric(sources.prometheus)
    young = starting_reason(found, sources.prometheus, start, end, gpu.period, gpu.min_coverage_percent)
    if not found.published and not young:
        young = started_reason(client.started(), sources.prometheus, start, end)
    updated = dict(metrics.nodes)
    grouped = points_by_node(found.points)
    starting = {}
    for node in lacking:
        answer = node_metrics(node, grouped.get(node.id, {}), periods, 0, "prometheus", where)
        if answer.publishes or node.hyperpod or not sources.cloudwatch:  # else CloudWatch's is the one to fix
            updated[node.id] = answer
            if young:
                starting[node.id] = young
    efa = dict(metrics.efa)
    efa_starting = {}
    if young:
        efa_starting = dict.fromkeys(efa_lacking, young)
    else:
        efa.update({key: c for key, c in found.efa.items() if c.instance_id in set(efa_lacking)})
    return replace(metrics, nodes=updated, efa=efa, unmatched={**metrics.unmatched, **found.unmatched},
                   queries=metrics.queries + found.queries, prometheus=sources.prometheus.describe(),
                   efa_counters=EFA_ERROR_COUNTERS, starting=starting, efa_starting=efa_starting)


def started_reason(started: datetime | None, prometheus: Endpoint, start: datetime, end: datetime) -> str:
    """Why a Prometheus holding no exporter series at all cannot be judged yet: it started inside the window (it
    has not scraped the exporters for long, if at all); "" when it has run longer, or does not say."""
    if started is None or started <= start:
        return ""
    return (f"{prometheus.describe()} started at {started.isoformat(timespec='seconds')}, "
            f"{format_duration(max(end - started, timedelta(0)))} before the window's end, and holds no DCGM or EFA "
            "exporter series yet: run again once it has scraped them for a window")


def starting_reason(found: PromResult, prometheus: Endpoint, start: datetime, end: datetime, period: timedelta,
                    floor_percent: float) -> str:
    """Why nothing this Prometheus answered can be judged yet, or "" when it can: it holds exporter series but
    no sample of them in the window, or none older than gpu.min_coverage_percent of it (it was started, or began
    receiving these series, inside the window). Its gaps then say nothing about the exporters, so the nodes it
    would answer for are not verified, never called healthy or blamed on their exporter."""
    if found.queries <= 1:  # no exporter metric it holds is one fmdoctor reads: gpu-metrics-missing's case
        return ""
    window = f"{start.isoformat(timespec='seconds')} to {end.isoformat(timespec='seconds')}"
    if found.earliest is None:
        return (f"{prometheus.describe()} lists DCGM/EFA exporter series but holds no sample of them from {window} "
                f"(it has just started, or stopped receiving them): run again once it holds a window of history")
    periods = periods_in(start, end, period)
    covered = min(periods, round((end - found.earliest) / period) + 1)
    if 100 * covered / periods >= floor_percent:
        return ""
    return (f"{prometheus.describe()} holds samples only since {found.earliest.isoformat(timespec='seconds')} "
            f"({covered} of the window's {periods} periods, under gpu.min_coverage_percent {floor_percent:g}%): it "
            "started, or began receiving these exporters' series, less than a window ago, so their gaps say nothing "
            f"about the nodes yet: run again after {format_duration((end - start) * floor_percent / 100)} of history")


def _empty(node: MetricNode, start: datetime, end: datetime, settings: ClusterSettings) -> NodeMetrics:
    return NodeMetrics(node.id, node.kind, node.expected_devices, periods_in(start, end, settings.gpu.period),
                       source="prometheus")


def _unseen(node: MetricNode, sources: Sources) -> str:
    return unseen_reason(sources)


def unseen_reason(sources: Sources) -> str:
    """Why a HyperPod node's metrics cannot be seen, and what to configure."""
    why = ("CloudWatch has no series for its nodes (they are not EC2 instances of this account) and no "
           "Prometheus is configured" if sources.cloudwatch else "no Prometheus is configured")
    return f"{why}{f'; {sources.note}' if sources.note else ''}: {CONFIGURE}"
