"""Read Spot notices once per run, from every source the mode offers, and share them through ``ctx.shared``.

Against a cluster: the Spot request status of its Spot instances (DescribeSpotInstanceRequests, filtered by
instance id in batches of 200) and, when configured, the SQS queue an EventBridge rule feeds. On a node:
IMDSv2. Only notices for this cluster's instances that are still current are kept; the rest are counted.

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
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.gaps import Gaps, SourceError
from fmdoctor.engine.host import Host, ImdsUnavailable
from fmdoctor.engine.inventory import chunked
from fmdoctor.spot.notices import (
    Malformed,
    SpotNotice,
    parse_imds_instance_action,
    parse_imds_rebalance,
    parse_message,
    parse_spot_request,
)

SHARED_KEY = "spot"
FILTER_VALUES_MAX = 200
RECEIVE_BATCH = 10  # ReceiveMessage's maximum
MAX_RECEIVES = 10  # VisibilityTimeout=0 cannot page through a queue; this bounds the sampling


@dataclass
class SpotFacts:
    notices: list[SpotNotice] = field(default_factory=list)  # current, for this cluster's instances
    ignored: Counter[str] = field(default_factory=Counter)
    sources: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)  # the sources that were read (maybe with gaps)
    gaps: Gaps = field(default_factory=Gaps)
    not_applicable: str | None = None
    spot_instances: int = 0

    def of_kind(self, kind: str) -> dict[str, list[SpotNotice]]:
        by_instance: dict[str, list[SpotNotice]] = {}
        for notice in self.notices:
            if notice.kind == kind:
                by_instance.setdefault(notice.instance_id, []).append(notice)
        return by_instance


def spot_facts(ctx: CheckContext) -> SpotFacts:
    """The run's Spot facts, with their gaps reported under the calling check."""
    facts: SpotFacts = ctx.shared(SHARED_KEY, lambda: load_spot_facts(ctx))
    if facts.not_applicable:
        raise NotApplicable(facts.not_applicable)
    facts.gaps.report(ctx)
    if facts.sources and not facts.answered:
        raise Unverified(f"none of the Spot notice sources answered ({', '.join(facts.sources)})")
    return facts


def load_spot_facts(ctx: CheckContext) -> SpotFacts:
    facts = SpotFacts()
    if ctx.scope.aws is None:
        _from_imds(facts, ctx.host, ctx)
        return facts
    spot = [i for i in ctx.inventory.instances if i.lifecycle == "spot"]
    facts.spot_instances = len(spot)
    if not spot:
        facts.not_applicable = f"no Spot instances in cluster {ctx.cluster}"
        return facts
    with facts.gaps.guard(f"Spot request status of {len(spot)} Spot instances"):
        facts.sources.append("ec2:DescribeSpotInstanceRequests")
        for raw in _spot_requests(ctx.client("ec2"), [i.id for i in spot]):
            try:
                notice = parse_spot_request(raw)
            except Malformed as exc:
                facts.gaps.add(f"Spot request {raw.get('SpotInstanceRequestId')}", "MalformedSpotRequest", str(exc))
                continue
            if notice:
                _keep(facts, notice, ctx)
        facts.answered.append("ec2:DescribeSpotInstanceRequests")
    url = ctx.settings.spot.queue_url
    if url:
        with facts.gaps.guard(f"Spot events in SQS queue {url}"):
            facts.sources.append(f"sqs:{url}")
            _from_queue(facts, ctx.client("sqs"), url, ctx)
            facts.answered.append(f"sqs:{url}")
    return facts


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


def _spot_requests(ec2: Any, instance_ids: list[str]) -> list[dict[str, Any]]:
    requests = []
    for batch in chunked(instance_ids, FILTER_VALUES_MAX):
        for page in ec2.get_paginator("describe_spot_instance_requests").paginate(
            Filters=[{"Name": "instance-id", "Values": batch}]
        ):
            requests += page.get("SpotInstanceRequests", [])
    return requests


def _from_queue(facts: SpotFacts, sqs: Any, url: str, ctx: CheckContext) -> None:
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
            notice = parse_message(message.get("Body", ""), reference=message_id)
        except Malformed as exc:
            malformed.append(f"{message_id}: {exc}")
            continue
        if notice is None:
            facts.ignored["other events"] += 1
        else:
            _keep(facts, notice, ctx)
    if malformed:
        facts.gaps.add(f"{len(malformed)} messages in {url} that are not readable Spot events (a notice among "
                       "them would be missed)", "MalformedEvent", "; ".join(malformed[:5]))
    if len(seen) < visible or in_flight:
        facts.gaps.add(
            f"{max(visible - len(seen), 0) + in_flight} of about {visible + in_flight} messages in {url}",
            "QueuePartiallyRead",
            f"read {len(seen)} without hiding any; {in_flight} are in flight with another consumer and "
            "ReceiveMessage with VisibilityTimeout=0 samples the rest",
        )


def _from_imds(facts: SpotFacts, host: Host, ctx: CheckContext) -> None:
    facts.sources.append("imds")
    with facts.gaps.guard(f"Spot notices of {host.name} from IMDS"):
        lifecycle = (_imds(host, "latest/meta-data/instance-life-cycle") or "").strip()
        if lifecycle != "spot":
            facts.not_applicable = f"{host.name} is not a Spot instance (IMDS instance-life-cycle: {lifecycle or '?'})"
            return
        instance_id = (_imds(host, "latest/meta-data/instance-id") or host.name).strip()
        facts.answered.append("imds")
        readers = (
            ("latest/meta-data/spot/instance-action", lambda t: parse_imds_instance_action(t, instance_id, ctx.now)),
            ("latest/meta-data/events/recommendations/rebalance", lambda t: parse_imds_rebalance(t, instance_id)),
        )
        for path, parse in readers:
            text = _imds(host, path)
            if text is None:
                continue  # 404: no notice
            try:
                _keep(facts, parse(text), ctx)
            except Malformed as exc:
                facts.gaps.add(f"{path} on {host.name}", "MalformedImdsReply", str(exc))


def _imds(host: Host, path: str) -> str | None:
    try:
        return host.imds(path)
    except ImdsUnavailable as exc:
        raise SourceError("ImdsUnavailable", str(exc)) from exc
