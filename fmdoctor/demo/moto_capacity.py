"""moto shims for capacity that goes away: Capacity Blocks and EC2 scheduled events (real AWS needs none).

moto reads ``InstanceMarketOptions`` only to mark an instance Spot, ignores
``CapacityReservationSpecification``, has no DescribeCapacityReservations, never schedules instance events
and does not implement DescribeInstanceStatus's ``event.code`` filter. Here:

- RunInstances with ``MarketType: capacity-block`` makes a ``capacity-block`` instance (not Spot) and records
  the targeted ``CapacityReservationId``, as DescribeInstances shows them on AWS;
- DescribeCapacityReservations answers from reservations the demo plays AWS's part for
  (:func:`grant_capacity_block`: a customer buys one with PurchaseCapacityBlock, which moto lacks), in the
  API's shape (``ReservationType: capacity-block``, ``EndDate``...);
- DescribeInstanceStatus lists the events :func:`schedule_instance_event` gave an instance (EC2 schedules
  them itself) and honours ``event.code``.

:func:`install` is called by :func:`fmdoctor.demo.moto_health.install`, before its Spot patch (which then
leaves capacity-block instances alone).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

import boto3


def install() -> None:
    _patch_run_instances()
    _add_capacity_reservations()
    _patch_instance_status()


def _patch_run_instances() -> None:
    from moto.ec2.responses.instances import InstanceResponse

    original = InstanceResponse.run_instances

    @functools.wraps(original)
    def run_instances(self: Any) -> Any:
        market = self._get_param("InstanceMarketOptions.MarketType")
        target = self._get_param("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId")
        result = original(self)
        for instance in result.result.instances:
            if market == "capacity-block":
                instance.lifecycle = "capacity-block"
            if target:
                instance.capacity_reservation_id = target
        return result

    InstanceResponse.run_instances = run_instances


def _reservations(backend: Any) -> dict[str, dict[str, Any]]:
    if not hasattr(backend, "_fmdoctor_capacity_reservations"):
        backend._fmdoctor_capacity_reservations = {}
    return backend._fmdoctor_capacity_reservations  # type: ignore[no-any-return]


def _add_capacity_reservations() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    def describe_capacity_reservations(self: Any) -> Any:
        ids = self._get_param("CapacityReservationIds", [])
        known = _reservations(self.ec2_backend)
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise EC2ClientError("InvalidCapacityReservationId.NotFound",
                                 f"The capacity reservation ID '{unknown[0]}' does not exist")
        selected = [known[i] for i in ids] if ids else list(known.values())
        return ActionResult({"CapacityReservations": selected})

    EC2Response.describe_capacity_reservations = describe_capacity_reservations


def _patch_instance_status() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.responses.instances import InstanceResponse

    original = InstanceResponse.describe_instance_status

    @functools.wraps(original)
    def describe_instance_status(self: Any) -> Any:
        filters = self._filters_from_querystring()
        codes = filters.pop("event.code", None)
        if codes is None:
            return original(self)
        running = [i for i in self.ec2_backend.all_running_instances() if getattr(i, "_fmdoctor_events", None)]
        statuses = []
        for instance in running:
            events = [e for e in instance._fmdoctor_events if e["Code"] in codes]
            if events:
                statuses.append({"InstanceId": instance.id, "AvailabilityZone": instance.placement.zone,
                                 "InstanceState": {"Code": 16, "Name": "running"}, "Events": events,
                                 "InstanceStatus": {"Status": "ok"}, "SystemStatus": {"Status": "ok"}})
        return ActionResult({"InstanceStatuses": statuses})

    InstanceResponse.describe_instance_status = describe_instance_status


def _backend(session: boto3.Session, region: str) -> Any:
    from moto.ec2.models import ec2_backends

    account = session.client("sts").get_caller_identity()["Account"]
    return ec2_backends[account][region]


def grant_capacity_block(session: boto3.Session, region: str, instance_type: str, availability_zone: str,
                         count: int, start: datetime, end: datetime, reservation_type: str = "capacity-block") -> str:
    """What EC2 creates when a Capacity Block offering is bought: an active reservation ending at ``end``
    (``reservation_type="default"``: an On-Demand Capacity Reservation, as CreateCapacityReservation makes)."""
    from moto.ec2.utils import random_id

    backend = _backend(session, region)
    reservation_id = random_id(prefix="cr", size=17)
    account = session.client("sts").get_caller_identity()["Account"]
    _reservations(backend)[reservation_id] = {
        "CapacityReservationId": reservation_id,
        "OwnerId": account,
        "CapacityReservationArn": f"arn:aws:ec2:{region}:{account}:capacity-reservation/{reservation_id}",
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": availability_zone,
        "Tenancy": "default",
        "TotalInstanceCount": count,
        "AvailableInstanceCount": count,
        "State": "active",
        "StartDate": start.astimezone(UTC),
        "EndDate": end.astimezone(UTC),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": start.astimezone(UTC),
        "ReservationType": reservation_type,
    }
    return reservation_id


def schedule_instance_event(session: boto3.Session, region: str, instance_id: str, code: str, not_before: datetime,
                            not_after: datetime, description: str) -> str:
    """What EC2 does when it schedules a retirement or maintenance for an instance; returns the event id."""
    from moto.ec2.utils import random_id

    instance = _backend(session, region).get_instance(instance_id)
    event_id = random_id(prefix="instance-event", size=17)
    events = getattr(instance, "_fmdoctor_events", None) or []
    events.append({"InstanceEventId": event_id, "Code": code, "Description": description,
                   "NotBefore": not_before.astimezone(UTC), "NotAfter": not_after.astimezone(UTC)})
    instance._fmdoctor_events = events
    return event_id
