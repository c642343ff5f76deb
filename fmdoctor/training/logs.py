"""The job's log lines from CloudWatch Logs: which log groups, which lines, and which host wrote each.

Log groups are ``training.log_groups`` when set, otherwise the conventions of the platforms that ship node logs:

* AWS ParallelCluster: ``/aws/parallelcluster/<cluster>-<timestamp>``, one stream per node and log,
  ``{hostname}.{instance_id}.{logIdentifier}`` (ParallelCluster user guide, "Integration with Amazon CloudWatch
  Logs", docs.aws.amazon.com/parallelcluster/latest/ug/cloudwatch-logs-v3.html);
* SageMaker HyperPod: ``/aws/sagemaker/Clusters/<cluster-name>/<cluster-id>``, streams ending in the node's
  instance id (e.g. ``LifecycleConfig/<instance-group>/<instance-id>``);
* Container Insights (Fluent Bit on EKS, also the EKS cluster of an EKS-orchestrated HyperPod cluster):
  ``/aws/containerinsights/<cluster>/application``, streams ``<node name>-application.var.log.containers.<pod>...``
  (HyperPod names its EKS nodes ``hyperpod-<instance id>``), each event a JSON
  record whose ``log`` is the container's line and ``kubernetes.host`` the node (Container-Insights-setup-logs-
  FluentBit in the CloudWatch user guide; aws-samples/amazon-cloudwatch-container-insights fluent-bit.yaml).

Three reads per group: the failure lines over ``training.log_lookback`` (FilterLogEvents with the filter pattern of
:mod:`fmdoctor.training.signatures`), the names of its streams (which node writes the job's output), and one page of
everything logged in the last ``training.silence`` — the sign that the job still talks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from fmdoctor.engine.concurrency import all_at_once
from fmdoctor.engine.gaps import Gaps
from fmdoctor.engine.prefetch import EarlyLoad
from fmdoctor.training.signatures import FILTER_PATTERN, FILTER_TERMS, unlabelled

if TYPE_CHECKING:
    from fmdoctor.engine.context import RunStart

PARALLELCLUSTER = "/aws/parallelcluster/{cluster}-"
HYPERPOD = "/aws/sagemaker/Clusters/{cluster}/"
CONTAINER_INSIGHTS = "/aws/containerinsights/{cluster}/application"
_PC_SUFFIX = re.compile(r"^\d{12}$")  # ParallelCluster's creation timestamp, e.g. testCluster-202202050215
_PC_STREAM = re.compile(r"^(?P<host>[^.]+)\.(?P<instance>i-[0-9a-f]{8,17})\.(?P<log>.+)$")
_INSTANCE = re.compile(r"(?<![0-9a-z])(i-[0-9a-f]{8,17})(?![0-9a-f])")  # also in hyperpod-i-...-application...
_FLUENT_BIT = re.compile(r"^(?P<host>[^/]+?)-(?:application|dataplane|host)\.")  # log_stream_prefix ${HOST_NAME}-
_IP_HOST = re.compile(r"ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}")
ACTIVITY_PAGE = 100


@dataclass(frozen=True)
class LogEvent:
    group: str
    stream: str
    time: datetime
    text: str
    host: str | None  # the node that wrote it, as its log names it (ip-10-0-1-23, a pod's node...)
    instance_id: str | None  # where the stream name carries it (ParallelCluster, HyperPod)
    job: str | None = None  # the job that wrote it, where its record says (a Kubernetes pod's job labels)


@dataclass
class JobLogs:
    groups: list[str] = field(default_factory=list)
    looked_for: list[str] = field(default_factory=list)  # the conventions tried when nothing was configured
    events: list[LogEvent] = field(default_factory=list)  # the failure lines, oldest first
    recent: list[LogEvent] = field(default_factory=list)  # anything logged within training.silence
    truncated: list[str] = field(default_factory=list)  # groups whose failure lines exceeded the page budget
    streams: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # stream -> (host, instance)
    gaps: Gaps = field(default_factory=Gaps)

    @property
    def readable(self) -> bool:
        return bool(self.groups) and len(self.gaps) < len(self.groups)


def convention_prefixes(cluster: str, hyperpod_name: str | None,
                        eks_cluster: str | None = None) -> list[tuple[str, str]]:
    """(prefix, kind) of every log-group naming convention for this cluster: ParallelCluster's, Container
    Insights' for the cluster and the EKS cluster, HyperPod's for its cluster name and the target's."""
    prefixes = [(PARALLELCLUSTER.format(cluster=cluster), "parallelcluster")]
    prefixes += [(CONTAINER_INSIGHTS.format(cluster=name), "exact")
                 for name in dict.fromkeys(filter(None, (cluster, eks_cluster)))]
    prefixes += [(HYPERPOD.format(cluster=name), "prefix") for name in dict.fromkeys(filter(None, (hyperpod_name,
                                                                                                  cluster)))]
    return prefixes


def list_log_groups(logs: Any, prefix: str) -> list[dict[str, Any]]:
    """DescribeLogGroups' pages for one name prefix."""
    paginator = logs.get_paginator("describe_log_groups")
    return [g for page in paginator.paginate(logGroupNamePrefix=prefix) for g in page.get("logGroups", [])]


def discover_groups(logs: Any, cluster: str, hyperpod_name: str | None, eks_cluster: str | None = None,
                    listed: Callable[[str], list[dict[str, Any]]] | None = None) -> tuple[list[str], list[str]]:
    """The groups that exist for this cluster's conventions, and the names looked for (for the message).
    ``eks_cluster``: the EKS cluster an EKS-orchestrated HyperPod cluster runs in (its Container Insights group).
    ``listed``: how one prefix is listed (the run's shared listings), when not a call of its own."""
    prefixes = convention_prefixes(cluster, hyperpod_name, eks_cluster)
    found: list[str] = []
    if listed is None:
        listed = lambda prefix: list_log_groups(logs, prefix)  # noqa: E731

    # One listing per convention, all at once: none needs another's answer.
    for (prefix, kind), groups in zip(prefixes, all_at_once(listed, [p for p, _ in prefixes], name="fmdoctor-logs"),
                                      strict=True):
        for group in groups:
            name = group["logGroupName"]
            if kind == "exact" and name != prefix:
                continue
            if kind == "parallelcluster" and not _PC_SUFFIX.match(name[len(prefix):]):
                continue
            found.append(name)
    looked_for = [p + ("<timestamp>" if k == "parallelcluster" else "<id>" if k == "prefix" else "")
                  for p, k in prefixes]
    return sorted(dict.fromkeys(found)), looked_for


def _prefixes_before_inventory(start: RunStart) -> list[str]:
    """The conventions' prefixes the settings name (none when training.log_groups names the groups); an EKS
    cluster's Container Insights group is known only once DescribeCluster says which EKS cluster."""
    if start.settings.training.log_groups:
        return []
    return [prefix for prefix, _ in convention_prefixes(start.cluster, start.settings.hyperpod.cluster_name)]


# DescribeLogGroups by name prefix, once per run, started before the inventory for the prefixes the settings name.
LOG_GROUPS: EarlyLoad[list[dict[str, Any]]] = EarlyLoad(
    "logs.groups", lambda start, prefix: list_log_groups(start.client("logs"), prefix), ("logs:DescribeLogGroups",),
    _prefixes_before_inventory, regional=True)


def read_group(logs: Any, group: str, now: datetime, lookback: timedelta, silence: timedelta,
               max_pages: int, into: JobLogs) -> None:
    """The failure lines, the streams and the recent lines of one group: three reads, none needing another's
    answer, made at once."""
    start = _millis(now - lookback)

    def failures() -> tuple[list[LogEvent], bool]:
        found: list[LogEvent] = []
        pages = logs.get_paginator("filter_log_events").paginate(
            logGroupName=group, startTime=start, endTime=_millis(now), filterPattern=FILTER_PATTERN)
        for count, page in enumerate(pages, start=1):
            # FilterLogEvents matches the pattern's terms anywhere; keep the lines that hold one (moto and older
            # agents may hand back more than the pattern asks for).
            found += [e for e in _events(group, page.get("events", [])) if is_signature(e.text)]
            if count >= max_pages and page.get("nextToken"):
                return found, True
        return found, False

    def streams() -> dict[str, tuple[str | None, str | None]]:
        found: dict[str, tuple[str | None, str | None]] = {}
        for count, page in enumerate(logs.get_paginator("describe_log_streams").paginate(logGroupName=group),
                                     start=1):
            found.update({s["logStreamName"]: _source(s["logStreamName"]) for s in page.get("logStreams", [])})
            if count >= max_pages:
                break
        return found

    def recent() -> list[LogEvent]:
        answer = logs.filter_log_events(logGroupName=group, startTime=_millis(now - silence), endTime=_millis(now),
                                        limit=ACTIVITY_PAGE)
        return list(_events(group, answer.get("events", [])))

    (events, truncated), named, lately = all_at_once(lambda read: read(), [failures, streams, recent],
                                                     name="fmdoctor-logs")
    into.events += events
    if truncated:
        into.truncated.append(group)
    into.streams.update(named)
    into.recent += lately


def read_job_logs(logs: Any, groups: list[str], now: datetime, lookback: timedelta, silence: timedelta,
                  max_pages: int, result: JobLogs) -> JobLogs:
    result.groups = list(groups)
    read = [JobLogs(groups=[group]) for group in groups]  # each group on its own: a failure leaves the others

    def one(n: int) -> None:
        with read[n].gaps.guard(f"the training logs in {groups[n]}"):
            read_group(logs, groups[n], now, lookback, silence, max_pages, read[n])

    all_at_once(one, list(range(len(groups))), name="fmdoctor-log-groups")
    for part in read:  # merged in the groups' order, as when they were read one after another
        result.events += part.events
        result.recent += part.recent
        result.truncated += part.truncated
        result.streams.update(part.streams)
        result.gaps += part.gaps
    result.events.sort(key=lambda e: (e.time, e.stream))
    return result


def stream_kind(stream: str) -> str:
    """A stream's name without its node and numbers: the streams of one job's output on every node share it
    ('ip-10-0-1-23.i-0abc.training' -> '*.*.training')."""
    kind = _IP_HOST.sub("*", _INSTANCE.sub("*", stream))
    return re.sub(r"[0-9a-f]{12,}|\d+", "#", kind)


def is_signature(text: str) -> bool:
    return any(term in text for term in FILTER_TERMS)


def _events(group: str, raw: Iterable[dict[str, Any]]) -> Iterable[LogEvent]:
    for event in raw:
        stream = event.get("logStreamName", "")
        text, record_host, job = _unwrap(event.get("message", ""))
        text = unlabelled(text)
        host, instance = _source(stream)
        yield LogEvent(group, stream, datetime.fromtimestamp(event["timestamp"] / 1000, UTC), text,
                       record_host or host, instance, job)


# The labels that name a pod's job: the training operator's (PyTorchJob, MPIJob: training.kubeflow.org/job-name), the
# Job controller's (batch.kubernetes.io/job-name, and job-name before Kubernetes 1.27) and JobSet's; Fluent Bit's
# kubernetes filter copies the pod's labels into the record (kubernetes.labels).
JOB_LABELS = ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-name",
              "job-name")


def _unwrap(message: str) -> tuple[str, str | None, str | None]:
    """A Fluent Bit record's container line, node and job (``namespace/name`` from its pod's job labels); any other
    message as it is."""
    if message.startswith("{"):
        try:
            record = json.loads(message)
        except ValueError:
            return message, None, None
        if isinstance(record, dict) and isinstance(record.get("log"), str):
            kubernetes = record.get("kubernetes")
            kubernetes = kubernetes if isinstance(kubernetes, dict) else {}
            host = kubernetes.get("host")
            labels = kubernetes.get("labels") if isinstance(kubernetes.get("labels"), dict) else {}
            name = next((labels[k] for k in JOB_LABELS if isinstance(labels.get(k), str) and labels[k]), None)
            namespace = kubernetes.get("namespace_name")
            job = f"{namespace}/{name}" if name and isinstance(namespace, str) else name
            return record["log"].rstrip("\n"), host if isinstance(host, str) else None, job
    return message, None, None


def _source(stream: str) -> tuple[str | None, str | None]:
    """(host, instance id) a stream name carries: ParallelCluster's 'host.instance.log', a HyperPod stream
    ending in the instance id, a Fluent Bit stream prefixed with the node's name."""
    parallelcluster = _PC_STREAM.match(stream)
    if parallelcluster:
        return parallelcluster["host"], parallelcluster["instance"]
    fluent_bit = _FLUENT_BIT.match(stream)
    if fluent_bit:  # the node name: ip-10-0-1-23.<region>.compute.internal, or HyperPod's hyperpod-i-...
        instance = _INSTANCE.search(fluent_bit["host"])
        return fluent_bit["host"], instance.group(1) if instance else None
    instance = _INSTANCE.search(stream)
    host = _IP_HOST.search(stream)
    return (host.group(0) if host else None), (instance.group(1) if instance else None)


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
