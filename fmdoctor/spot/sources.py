"""Read interruption notices once per run, from every source the mode offers, and share them through
``ctx.shared``.

Against a cluster: the Spot request status of its Spot instances (DescribeSpotInstanceRequests, filtered by
instance id in batches of 200), the scheduled events of all its instances (one DescribeInstanceStatus
filtered by ``event.code``, paged at 1,000, whatever the cluster's size), and, when configured, the SQS queue
an EventBridge rule feeds. On a node: IMDSv2. Only notices for this cluster's instances that are still
current are kept; the rest are counted.

The queue is read without taking anything from its other consumers: ReceiveMessage with
VisibilityTimeout=0 leaves every message visible, and nothing is ever deleted. A receive still counts
toward a message's receive count, so a queue with a redrive policy is not read at all (every fmdoctor run
would move events closer to the dead-letter queue); give fmdoctor its own queue as a second target of the
EventBridge rule instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.engine.check import NotApplicable, Unverified
from fmdoctor.engine.concurrency import settle_all
from fmdoctor.engine.context import CheckContext, RunStart
from fmdoctor.engine.gaps import Gaps, SourceError
from fmdoctor.engine.host import Host, ImdsUnavailable
from fmdoctor.engine.inventory import chunked
from fmdoctor.engine.prefetch import EarlyLoad
from fmdoctor.spot.ec2 import (
    SCHEDULED_ACTIONS,
    parse_imds_instance_action,
    parse_imds_rebalance,
    parse_imds_scheduled,
    parse_instance_status,
    parse_spot_request,
)
from fmdoctor.spot.events import parse_message
from fmdoctor.spot.notices import STALE_AFTER, CapacityBlockWarning, Malformed, SpotNotice

SHARED_KEY = "spot"
FILTER_VALUES_MAX = 200
STATUS_PAGE = 1000  # DescribeInstanceStatus's maximum without instance ids
RECEIVE_BATCH = 10  # ReceiveMessage's maximum
MAX_RECEIVES = 10  # VisibilityTimeout=0 cannot page through a queue; this bounds the sampling
QUEUE = "queue"  # the Gaps key of the SQS source
QUEUE_KEY = "spot-queue"


@dataclass
class SpotFacts:
    notices: list[SpotNotice] = field(default_factory=list)  # current, for this cluster's instances
    capacity_warnings: list[CapacityBlockWarning] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    sources: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)  # the sources that were read (maybe with gaps)
    gaps: dict[str, Gaps] = field(default_factory=dict)  # by source: 'ec2', 'imds', QUEUE
    spot_nodes: int = 0  # Spot instances of the cluster (or 1 on a Spot node)
    not_spot: str | None = None  # why the rebalance check has nothing to look at

    def gaps_of(self, source: str) -> Gaps:
        return self.gaps.setdefault(source, Gaps())

    def of_kind(self, kind: str) -> dict[str, list[SpotNotice]]:
        by_instance: dict[str, list[SpotNotice]] = {}
        for notice in self.notices:
            if notice.kind == kind:
                by_instance.setdefault(notice.instance_id, []).append(notice)
        return by_instance


def spot_facts(ctx: CheckContext, spot_only: bool = False) -> SpotFacts:
    """The run's interruption facts, with their gaps reported under the calling check; ``spot_only`` for a
    check that only Spot nodes can fail (rebalance recommendations)."""
    facts: SpotFacts = ctx.shared(SHARED_KEY, lambda: load_spot_facts(ctx))
    if spot_only and facts.not_spot:
        raise NotApplicable(facts.not_spot)
    for gaps in facts.gaps.values():
        gaps.report(ctx)
    if facts.sources and not facts.answered:
        raise Unverified(f"none of the interruption notice sources answered ({', '.join(facts.sources)})")
    return facts


def load_spot_facts(ctx: CheckContext) -> SpotFacts:
    facts = SpotFacts()
    if ctx.scope.aws is None:
        _from_imds(facts, ctx.host, ctx)
        return facts
    if ctx.settings.spot.queue_url:  # the queue's messages come in beside the EC2 describes below
        QUEUE_READ.begin(ctx.scope.start)
    instances = list(ctx.inventory.instances)
    spot = [i for i in instances if i.lifecycle == "spot"]
    facts.spot_nodes = len(spot)
    # The two EC2 reads need nothing from each other: made at once, read in this order.
    requests, statuses = settle_all([lambda: _spot_request_pages(ctx, [i.id for i in spot]) if spot else [],
                                     lambda: SCHEDULED_EVENTS.get(ctx)], name="fmdoctor-spot")
    if not spot:
        facts.not_spot = f"no Spot instances in cluster {ctx.cluster}"
    else:
        _read(facts, "ec2", "ec2:DescribeSpotInstanceRequests", f"Spot request status of {len(spot)} Spot instances",
              lambda: _spot_requests(facts, ctx, requests()))
    _read(facts, "ec2", "ec2:DescribeInstanceStatus", f"EC2 scheduled events of {len(instances)} instances",
          lambda: _scheduled_events(facts, ctx, statuses()))
    queue = queue_read(ctx)
    if queue is not None:
        facts.sources.append(queue.source)
        if queue.answered:
            facts.answered.append(queue.source)
        facts.gaps[QUEUE] = queue.gaps
        facts.capacity_warnings = queue.capacity_warnings
        facts.ignored.update(queue.ignored)
        for notice in queue.notices:
            _keep(facts, notice, ctx)
    return facts


@dataclass
class QueueRead:
    """Everything the SQS queue held, read once per run (the Spot checks and the Capacity Block check share it)."""

    source: str
    notices: list[SpotNotice] = field(default_factory=list)  # every instance's: the caller keeps its cluster's
    capacity_warnings: list[CapacityBlockWarning] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    gaps: Gaps = field(default_factory=Gaps)
    answered: bool = False


def _load_queue(start: RunStart, _: str) -> QueueRead:
    url = start.settings.spot.queue_url or ""
    read = QueueRead(f"sqs:{url}")
    with read.gaps.guard(f"interruption events in SQS queue {url}"):
        _from_queue(read, start.client("sqs"), url, start)
        read.answered = True
    return read


# The configured queue's messages, read once per run before the inventory (they name instances; the checks keep
# their cluster's).
QUEUE_READ: EarlyLoad[QueueRead] = EarlyLoad(
    QUEUE_KEY, _load_queue, ("sqs:GetQueueAttributes", "sqs:ReceiveMessage"),
    lambda start: [""] if start.settings.spot.queue_url and start.aws is not None else [])


def queue_read(ctx: CheckContext) -> QueueRead | None:
    """The configured queue's messages, or None when no queue is configured."""
    if not ctx.settings.spot.queue_url or ctx.scope.aws is None:
        return None
    return QUEUE_READ.get(ctx)


def _read(facts: SpotFacts, gap_key: str, source: str, what: str, read: Any) -> None:
    facts.sources.append(source)
    with facts.gaps_of(gap_key).guard(what):
        read()
        facts.answered.append(source)


def _keep(facts: SpotFacts, notice: SpotNotice, ctx: CheckContext) -> None:
    if ctx.scope.aws is not None:
        instance = ctx.inventory.instance(notice.instance_id)
        if instance is None:
            facts.ignored["other instances"] += 1
            return
        launch_time = instance.launch_time
    else:
        launch_time = None
    if not notice.is_current(ctx.now, launch_time):
        facts.ignored["stale"] += 1
        return
    facts.notices.append(notice)


def _spot_request_pages(ctx: CheckContext, instance_ids: list[str]) -> list[dict[str, Any]]:
    ec2 = ctx.client("ec2")
    return [page for batch in chunked(instance_ids, FILTER_VALUES_MAX)
            for page in ec2.get_paginator("describe_spot_instance_requests").paginate(
                Filters=[{"Name": "instance-id", "Values": batch}])]


def _spot_requests(facts: SpotFacts, ctx: CheckContext, pages: list[dict[str, Any]]) -> None:
    for page in pages:
        for raw in page.get("SpotInstanceRequests", []):
            try:
                notice = parse_spot_request(raw)
            except Malformed as exc:
                facts.gaps_of("ec2").add(f"Spot request {raw.get('SpotInstanceRequestId')}",
                                         "MalformedSpotRequest", str(exc))
                continue
            if notice:
                _keep(facts, notice, ctx)


def _instance_status_pages(start: RunStart, _: str = "") -> list[dict[str, Any]]:
    """Only instances with a scheduled event match the filter, so one page covers any cluster."""
    return list(start.client("ec2").get_paginator("describe_instance_status").paginate(
        Filters=[{"Name": "event.code", "Values": sorted(SCHEDULED_ACTIONS)}],
        PaginationConfig={"PageSize": STATUS_PAGE},
    ))


# The account and region's instances with a scheduled event (the checks keep their cluster's): needs no inventory.
SCHEDULED_EVENTS: EarlyLoad[list[dict[str, Any]]] = EarlyLoad(
    "ec2.scheduled-events", _instance_status_pages, ("ec2:DescribeInstanceStatus",),
    lambda start: [""] if start.aws is not None else [], regional=True)


def _scheduled_events(facts: SpotFacts, ctx: CheckContext, pages: list[dict[str, Any]]) -> None:
    for page in pages:
        for raw in page.get("InstanceStatuses", []):
            if ctx.inventory.instance(str(raw.get("InstanceId"))) is None:
                continue  # another cluster's instance (the filter covers the whole account and region)
            try:
                notices = parse_instance_status(raw, ctx.now)
            except Malformed as exc:
                facts.gaps_of("ec2").add(f"scheduled events of {raw.get('InstanceId')}", "MalformedInstanceStatus",
                                         str(exc))
                continue
            for notice in notices:
                _keep(facts, notice, ctx)


def _from_queue(read: QueueRead, sqs: Any, url: str, ctx: RunStart) -> None:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "RedrivePolicy"],
    ).get("Attributes", {})
    if attrs.get("RedrivePolicy"):
        raise SourceError(
            "QueueHasRedrivePolicy",
            f"{url} has a redrive policy ({attrs['RedrivePolicy']}): each receive counts toward its "
            "maxReceiveCount, so fmdoctor does not read it; give fmdoctor its own queue without one",
        )
    visible = int(attrs.get("ApproximateNumberOfMessages", 0) or 0)
    in_flight = int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0) or 0)
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(MAX_RECEIVES):
        reply = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=RECEIVE_BATCH, VisibilityTimeout=0,
                                    WaitTimeSeconds=0)
        new = [m for m in reply.get("Messages", []) if m.get("MessageId") not in seen]
        seen.update({m["MessageId"]: m for m in new})
        if not new or len(seen) >= visible:
            break
    malformed = []
    for message_id, message in seen.items():
        try:
            parsed = parse_message(message.get("Body", ""), message_id, ctx.now)
        except Malformed as exc:
            malformed.append(f"{message_id}: {exc}")
            continue
        if parsed.ignored:
            read.ignored[parsed.ignored] += 1
        for notice in parsed.notices:
            if not isinstance(notice, CapacityBlockWarning):
                read.notices.append(notice)
            elif notice.end_date is None or notice.end_date > ctx.now - STALE_AFTER:
                read.capacity_warnings.append(notice)
            else:
                read.ignored["stale"] += 1
    gaps = read.gaps
    if malformed:
        gaps.add(f"{len(malformed)} messages in {url} that are not readable events (an interruption among them "
                 "would be missed)", "MalformedEvent", "; ".join(malformed[:5]))
    if len(seen) < visible or in_flight:
        gaps.add(
            f"{max(visible - len(seen), 0) + in_flight} of about {visible + in_flight} messages in {url}",
            "QueuePartiallyRead",
            f"read {len(seen)} without hiding any; {in_flight} are in flight with another consumer and "
            "ReceiveMessage with VisibilityTimeout=0 samples the rest",
        )


def _from_imds(facts: SpotFacts, host: Host, ctx: CheckContext) -> None:
    facts.sources.append("imds")
    gaps = facts.gaps_of("imds")
    with gaps.guard(f"interruption notices of {host.name} from IMDS"):
        lifecycle = (_imds(host, "latest/meta-data/instance-life-cycle") or "").strip()
        instance_id = (_imds(host, "latest/meta-data/instance-id") or host.name).strip()
        facts.answered.append("imds")
        readers: list[tuple[str, Any]] = [
            ("latest/meta-data/events/maintenance/scheduled", lambda t: parse_imds_scheduled(t, instance_id, ctx.now)),
        ]
        if lifecycle == "spot":
            facts.spot_nodes = 1
            readers += [
                ("latest/meta-data/spot/instance-action",
                 lambda t: [parse_imds_instance_action(t, instance_id, ctx.now)]),
                ("latest/meta-data/events/recommendations/rebalance", lambda t: [parse_imds_rebalance(t, instance_id)]),
            ]
        else:
            facts.not_spot = f"{host.name} is not a Spot instance (IMDS instance-life-cycle: {lifecycle or '?'})"
        for path, parse in readers:
            text = _imds(host, path)
            if text is None:
                continue  # 404: no notice
            try:
                for notice in parse(text):
                    _keep(facts, notice, ctx)
            except Malformed as exc:
                gaps.add(f"{path} on {host.name}", "MalformedImdsReply", str(exc))


def _imds(host: Host, path: str) -> str | None:
    try:
        return host.imds(path)
    except ImdsUnavailable as exc:
        raise SourceError("ImdsUnavailable", str(exc)) from exc
