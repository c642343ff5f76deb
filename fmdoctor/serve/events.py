"""The events ``fmdoctor serve`` reacts to, parsed from their documented shapes into one :class:`Event`.

EventBridge events (delivered to SQS directly, or wrapped in an SNS notification), by ``detail-type``:

- ``CloudWatch Alarm State Change``:
  docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html
- ``EC2 Spot Instance Interruption Warning``:
  docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
- ``EC2 Instance Rebalance Recommendation``: docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
- ``Capacity Block Expiration Warning`` (also ``Capacity Block Reservation Expiration Warning`` in some copies of
  the page): docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-monitor.html
- ``SageMaker HyperPod Cluster Node Health Event``, ``... Cluster State Change``, ``... Cluster Event``:
  docs.aws.amazon.com/sagemaker/latest/dg/automating-sagemaker-with-eventbridge.html and
  .../sagemaker-hyperpod-cluster-events-reference.html
- ``SageMaker Endpoint State Change`` (its documented sample says ``IN_SERVICE`` and an epoch-millisecond
  ``time``; the API says ``InService``: both are read)
- ``AWS Health Event``: docs.aws.amazon.com/health/latest/ug/aws-health-events-eventbridge-schema.html (backup
  copies share ``communicationId``, which with the account identifies the message)

Webhooks: Prometheus Alertmanager's (prometheus.io/docs/alerting/latest/configuration/#webhook_config, version
"4") and Grafana alerting's, which has the same shape plus a few fields; each alert becomes one event.

Everything taken from an event is data: text is stripped of control characters and capped in length before it
goes anywhere. A body that is not JSON, too large, or of an unknown shape raises :class:`BadEvent`.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

TEXT_MAX = 600  # characters kept of any one text field of an event
LABELS_MAX = 40  # labels / tags kept per event

ALARM = "cloudwatch-alarm"
SPOT_INTERRUPTION = "spot-interruption"
SPOT_REBALANCE = "spot-rebalance"
CAPACITY_BLOCK = "capacity-block-expiring"
HYPERPOD_NODE = "hyperpod-node-health"
HYPERPOD_CLUSTER = "hyperpod-cluster-state"
HYPERPOD_EVENT = "hyperpod-cluster-event"
ENDPOINT = "endpoint-status"
HEALTH = "aws-health"
ALERTMANAGER = "alertmanager"
KINDS = (ALARM, SPOT_INTERRUPTION, SPOT_REBALANCE, CAPACITY_BLOCK, HYPERPOD_NODE, HYPERPOD_CLUSTER, HYPERPOD_EVENT,
         ENDPOINT, HEALTH, ALERTMANAGER)

# Endpoint statuses that need no one woken up (compared upper-case without underscores: IN_SERVICE = InService).
_ENDPOINT_QUIET = {"INSERVICE", "CREATING", "UPDATING", "SYSTEMUPDATING", "DELETING"}


class BadEvent(ValueError):
    """A message that cannot be investigated; ``reason`` is the counter it is acknowledged under."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason  # malformed | too_large | unknown_event


@dataclass(frozen=True)
class Event:
    id: str  # idempotency key: the same event delivered twice has the same id
    kind: str
    source: str  # eventbridge | alertmanager | grafana
    title: str  # what fired, one line
    state: str
    firing: bool  # False: an OK / resolved / healthy transition
    repeat_key: str  # the same alarm again: its next event updates the same thread
    time: datetime | None = None
    region: str | None = None
    account: str | None = None
    detail: str = ""  # reason or description, as the source wrote it
    alarm: str | None = None
    namespace: str | None = None
    metric: str | None = None
    dimensions: dict[str, str] = field(default_factory=dict)
    instances: tuple[str, ...] = ()
    endpoint: str | None = None
    hyperpod_cluster: str | None = None
    capacity_reservation: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # Alertmanager labels, alarm or endpoint tags
    nodes: tuple[str, ...] = ()  # names the alert gives its node (NODE_LABELS): which node, the resolver says

    def resources(self) -> set[str]:
        """Ids the event is about: a finding on one of them is the likeliest cause."""
        named = (self.endpoint, self.hyperpod_cluster, self.capacity_reservation)
        return set(self.instances) | {v for v in named if v} | set(self.dimensions.values())

    def field_value(self, name: str) -> str | None:
        """A field by the name routing rules use (``label.NAME`` for a label or tag)."""
        if name.startswith("label."):
            return self.labels.get(name[6:])
        if name == "instance":
            return ",".join(self.instances) or None
        value = getattr(self, name, None)
        return value if isinstance(value, str) else None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "source": self.source, "title": self.title, "state": self.state,
                "firing": self.firing, "time": self.time.isoformat() if self.time else None, "region": self.region,
                "detail": self.detail, "alarm": self.alarm, "metric": self.metric, "instances": list(self.instances),
                "endpoint": self.endpoint, "hyperpod_cluster": self.hyperpod_cluster, "labels": self.labels}


def clean(value: Any, limit: int = TEXT_MAX) -> str:
    """Event text as inert data: control and invisible format characters removed, length capped. A text that
    must be cut has its secrets redacted first (the outputs' policy): a secret cut in two no longer matches its
    pattern, and every output (Slack, webhook, SNS, the model) would have sent the part that was left."""
    text = value if isinstance(value, str) else "" if value is None else str(value)
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) not in ("Cc", "Cf"))
    if len(text) <= limit:
        return text
    from fmdoctor.safety.redact import SECRETS

    text = SECRETS(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_body(body: str | bytes, max_bytes: int) -> list[Event]:
    """One SQS message body or webhook body: EventBridge (maybe inside SNS), Alertmanager or Grafana."""
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8", errors="replace"))
    if size > max_bytes:
        raise BadEvent("too_large", f"{size} bytes, over the {max_bytes}-byte limit")
    try:
        data = json.loads(body)
        if isinstance(data, dict) and data.get("Type") == "Notification" and isinstance(data.get("Message"), str):
            data = json.loads(data["Message"])  # SNS wrapped it
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEvent("malformed", f"not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise BadEvent("malformed", f"a JSON {type(data).__name__}, not an object")
    if isinstance(data.get("alerts"), list):
        return parse_alertmanager(data)
    if "detail-type" in data or "detail_type" in data:
        return [parse_eventbridge(data)]
    raise BadEvent("unknown_event", "neither an EventBridge event nor an Alertmanager/Grafana webhook")


def parse_eventbridge(data: dict[str, Any]) -> Event:
    detail_type = clean(data.get("detail-type") or data.get("detail_type"), 120)
    detail = data.get("detail")
    if not isinstance(detail, dict):
        raise BadEvent("malformed", f"{detail_type!r} without a detail object")
    parser = _PARSERS.get(detail_type)
    if parser is None:
        raise BadEvent("unknown_event", f"no investigation for detail-type {detail_type!r} "
                       f"(source {clean(data.get('source'), 60)!r})")
    event_id = clean(data.get("id") or data.get("customer_event_id"), 200)
    if not event_id:
        raise BadEvent("malformed", f"{detail_type!r} without an id")
    envelope = {"id": event_id, "time": _time(data.get("time")), "region": _opt(data.get("region")),
                "account": _opt(data.get("account")), "source": "eventbridge"}
    try:
        return parser(detail, envelope, [clean(r, 300) for r in data.get("resources") or [] if isinstance(r, str)])
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadEvent("malformed", f"{detail_type!r} missing or mistyped field {exc}") from None


def _alarm(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
    name = clean(detail["alarmName"], 255)
    state = detail.get("state") or {}
    config = detail.get("configuration") or {}
    metric: dict[str, Any] = {}
    for entry in config.get("metrics") or []:  # the first metric that names one (math expressions do not)
        metric = ((entry or {}).get("metricStat") or {}).get("metric") or {}
        if metric:
            break
    dimensions = {clean(k, 100): clean(v, 255) for k, v in (metric.get("dimensions") or {}).items()}
    value = clean(state.get("value"), 40)
    return Event(
        **env, kind=ALARM, title=f"CloudWatch alarm {name} is {value}", state=value, firing=value == "ALARM",
        repeat_key=f"alarm:{env['account']}:{env['region']}:{name}", detail=clean(state.get("reason")),
        alarm=name, namespace=_opt(metric.get("namespace")), metric=_opt(metric.get("name")),
        dimensions=dimensions, instances=tuple(v for k, v in dimensions.items() if k == "InstanceId"),
        endpoint=dimensions.get("EndpointName"), labels=_labels(detail.get("alarmTags")))


def _spot(kind: str) -> Any:
    def parse(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
        instance = clean(detail["instance-id"], 40)
        action = clean(detail.get("instance-action"), 40)
        what = (f"Spot interruption warning: {instance} will {action or 'be interrupted'} in two minutes"
                if kind == SPOT_INTERRUPTION else f"Rebalance recommendation for Spot instance {instance}")
        return Event(**env, kind=kind, title=what, state=action or "recommended", firing=True,
                     repeat_key=f"{kind}:{instance}", instances=(instance,))
    return parse


def _capacity_block(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
    reservation = clean(detail["capacity-reservation-id"], 60)
    end = clean(detail.get("end-date"), 60)
    return Event(**env, kind=CAPACITY_BLOCK, title=f"Capacity Block {reservation} ends at {end or 'its end date'}",
                 state="expiring", firing=True, repeat_key=f"{CAPACITY_BLOCK}:{reservation}",
                 detail="instances in the reservation begin to terminate about 30 minutes before it ends",
                 capacity_reservation=reservation)


def _hyperpod_node(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
    cluster = clean(detail["ClusterName"], 63)
    instance = clean(detail.get("InstanceId"), 40)
    health = detail.get("HealthSummary") or {}
    status = clean(health.get("HealthStatus"), 40)
    notes = [clean(health.get(k)) for k in ("HealthStatusReason", "RepairAction", "Recommendation") if health.get(k)]
    return Event(**env, kind=HYPERPOD_NODE, title=f"HyperPod {cluster} node {instance} is {status}", state=status,
                 firing=status.lower() != "healthy", repeat_key=f"{HYPERPOD_NODE}:{cluster}:{instance}",
                 detail=" · ".join(notes), instances=(instance,) if instance else (), hyperpod_cluster=cluster,
                 labels=_labels(detail.get("Tags")))


def _hyperpod_cluster(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
    cluster = clean(detail["ClusterName"], 63)
    status = clean(detail.get("ClusterStatus"), 40)
    failed = [clean(g.get("InstanceGroupName"), 63) for g in detail.get("InstanceGroups") or []
              if isinstance(g, dict) and str(g.get("Status")) in ("Failed", "Degraded")]
    firing = status in ("Failed", "RollingBack") or bool(failed)
    note = clean(detail.get("FailureMessage")) or (f"instance groups not healthy: {', '.join(failed)}"
                                                   if failed else "")
    return Event(**env, kind=HYPERPOD_CLUSTER, title=f"HyperPod cluster {cluster} is {status}", state=status,
                 firing=firing, repeat_key=f"{HYPERPOD_CLUSTER}:{cluster}", detail=note, hyperpod_cluster=cluster)


def _hyperpod_event(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
    inner = detail["EventDetails"]
    cluster = clean(inner["ClusterName"], 63)
    level = clean(inner.get("EventLevel"), 20) or "Info"
    instance = clean(inner.get("InstanceId"), 40)
    description = clean(inner.get("Description"))
    return Event(**env, kind=HYPERPOD_EVENT, title=f"HyperPod {cluster} {level.lower()}: {description[:160]}",
                 state=level, firing=level in ("Warning", "Error"),
                 repeat_key=f"{HYPERPOD_EVENT}:{cluster}:{clean(inner.get('ResourceType'), 20)}:{instance}",
                 detail=description, instances=(instance,) if instance else (), hyperpod_cluster=cluster)


def _endpoint(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
    name = clean(detail["EndpointName"], 63)
    status = clean(detail.get("EndpointStatus"), 40)
    quiet = status.upper().replace("_", "") in _ENDPOINT_QUIET
    return Event(**env, kind=ENDPOINT, title=f"SageMaker endpoint {name} is {status}", state=status,
                 firing=not quiet, repeat_key=f"{ENDPOINT}:{name}", detail=clean(detail.get("FailureReason")),
                 endpoint=name, labels=_labels(detail.get("Tags")))


def _health(detail: dict[str, Any], env: dict[str, Any], resources: list[str]) -> Event:
    code = clean(detail["eventTypeCode"], 120)
    status = clean(detail.get("statusCode"), 20) or "open"
    entities = [clean(e.get("entityValue"), 255) for e in detail.get("affectedEntities") or [] if isinstance(e, dict)]
    instances = tuple(dict.fromkeys(v for v in [*entities, *resources] if v.startswith("i-")))
    descriptions = detail.get("eventDescription") or [{}]
    communication = detail.get("communicationId")
    if communication:  # a backup copy of the same message carries the same communication id (the schema page);
        # the status is part of the id so that an update of the same event (open -> closed) is not a duplicate
        env = {**env, "id": f"health:{env['account']}:{clean(communication, 200)}:{clean(detail.get('page'), 8)}:"
                            f"{clean(detail.get('statusCode'), 20)}"}
    return Event(**env, kind=HEALTH, title=f"AWS Health {code} ({status})", state=status, firing=status != "closed",
                 repeat_key=f"{HEALTH}:{clean(detail.get('eventArn'), 400) or code}",
                 detail=clean((descriptions[0] or {}).get("latestDescription")), instances=instances)


_PARSERS = {
    "CloudWatch Alarm State Change": _alarm,
    "EC2 Spot Instance Interruption Warning": _spot(SPOT_INTERRUPTION),
    "EC2 Instance Rebalance Recommendation": _spot(SPOT_REBALANCE),
    "Capacity Block Expiration Warning": _capacity_block,
    "Capacity Block Reservation Expiration Warning": _capacity_block,
    "SageMaker HyperPod Cluster Node Health Event": _hyperpod_node,
    "SageMaker HyperPod Cluster State Change": _hyperpod_cluster,
    "SageMaker HyperPod Cluster Event": _hyperpod_event,
    "SageMaker Endpoint State Change": _endpoint,
    "AWS Health Event": _health,
}
DETAIL_TYPES = tuple(_PARSERS)


# Labels that name a node in an alert: DCGM exporter's Hostname, Prometheus's instance (host:port it scraped),
# the Kubernetes node a relabelling or kube-state-metrics adds, Container Insights' NodeName, the agent's host.
NODE_LABELS = ("Hostname", "instance", "node", "kubernetes_node", "NodeName", "host")


def parse_alertmanager(data: dict[str, Any]) -> list[Event]:
    """One event per alert of an Alertmanager (version 4) or Grafana webhook notification."""
    source = "grafana" if "orgId" in data or "title" in data else ALERTMANAGER
    common = _labels(data.get("commonLabels"))
    events = []
    for alert in data["alerts"]:
        if not isinstance(alert, dict):
            raise BadEvent("malformed", "an alert that is not an object")
        labels = {**common, **_labels(alert.get("labels"))}
        annotations = _labels(alert.get("annotations"))
        status = clean(alert.get("status") or data.get("status"), 20)
        starts = clean(alert.get("startsAt"), 40)
        fingerprint = clean(alert.get("fingerprint"), 64) or _digest(json.dumps(labels, sort_keys=True))
        name = labels.get("alertname", "alert")
        events.append(Event(
            id=f"{source}:{fingerprint}:{starts}:{status}", kind=ALERTMANAGER, source=source,
            title=f"{source.capitalize()} alert {name} is {status}", state=status, firing=status == "firing",
            repeat_key=f"{source}:{fingerprint}", time=_time(starts), region=labels.get("region"),
            detail=annotations.get("description") or annotations.get("summary") or "",
            instances=tuple(v for v in (labels.get("instance_id"), labels.get("InstanceId")) if v),
            endpoint=labels.get("endpoint") or labels.get("EndpointName"), labels=labels,
            nodes=tuple(dict.fromkeys(labels[k] for k in NODE_LABELS if labels.get(k)))))
    return events


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {clean(k, 100): clean(v, 300) for k, v in list(value.items())[:LABELS_MAX]}


def _opt(value: Any) -> str | None:
    return clean(value, 255) or None


def _time(value: Any) -> datetime | None:
    """ISO 8601 (EventBridge, Alertmanager) or epoch milliseconds as a string (the endpoint sample)."""
    if isinstance(value, str) and value.isdigit():
        return datetime.fromtimestamp(int(value) / 1000, UTC)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
