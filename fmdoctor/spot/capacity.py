"""Capacity Blocks: when the reservation a node runs in ends, and when EC2 starts taking its nodes away.

A Capacity Block is a Capacity Reservation with ``ReservationType: capacity-block`` and a fixed ``EndDate``;
its instances show ``InstanceLifecycle: capacity-block`` and the ``CapacityReservationId`` in
DescribeInstances. Forty minutes before the end EventBridge sends the expiration warning, and EC2 begins
terminating the block's instances ten minutes later, thirty minutes before the end (EC2 user guide,
capacity-blocks-monitor.html). A block can be extended until an hour before it ends
(capacity-blocks-extend.html). One DescribeCapacityReservations call names every reservation the
cluster's nodes use (paginated by ids).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.spot.notices import CapacityBlockWarning, parse_time

CAPACITY_BLOCK = "capacity-block"
WARNING_LEAD = timedelta(minutes=40)  # the expiration warning comes this long before the end
TERMINATIONS_AFTER_WARNING = timedelta(minutes=10)
TERMINATION_LEAD = WARNING_LEAD - TERMINATIONS_AFTER_WARNING  # terminations begin 30 minutes before the end
EXTEND_UNTIL = timedelta(hours=1)  # an extension must be requested at least this long before the end


@dataclass(frozen=True)
class CapacityBlock:
    reservation_id: str
    end_date: datetime | None
    state: str = "active"
    instance_type: str = ""
    availability_zone: str = ""
    warning: CapacityBlockWarning | None = None  # the EventBridge expiration warning, when the queue had it

    @property
    def ends(self) -> datetime | None:
        """The reservation's end, from DescribeCapacityReservations or, failing that, the warning's end-date."""
        if self.end_date is not None:
            return self.end_date
        if self.warning is None:
            return None
        return self.warning.end_date or self.warning.noticed_at + WARNING_LEAD

    @property
    def terminations_begin(self) -> datetime | None:
        """When EC2 starts terminating the block's instances: the earlier of 30 minutes before the end and
        10 minutes after the warning (whichever source is known)."""
        candidates = []
        if self.ends is not None:
            candidates.append(self.ends - TERMINATION_LEAD)
        if self.warning is not None:
            candidates.append(self.warning.noticed_at + TERMINATIONS_AFTER_WARNING)
        return min(candidates) if candidates else None

    def with_warning(self, warning: CapacityBlockWarning) -> CapacityBlock:
        return CapacityBlock(self.reservation_id, self.end_date, self.state, self.instance_type,
                             self.availability_zone, warning)


def describe_capacity_blocks(ec2: Any, reservation_ids: Iterable[str]) -> dict[str, CapacityBlock | None]:
    """Each id -> its Capacity Block, or None for a reservation of another type (an On-Demand Capacity
    Reservation does not end on its own schedule)."""
    ids = sorted(set(reservation_ids))
    found: dict[str, CapacityBlock | None] = {}
    if not ids:
        return found
    for page in ec2.get_paginator("describe_capacity_reservations").paginate(CapacityReservationIds=ids):
        for raw in page.get("CapacityReservations", []):
            found[raw["CapacityReservationId"]] = _block(raw)
    return found


def _block(raw: dict[str, Any]) -> CapacityBlock | None:
    if raw.get("ReservationType") != CAPACITY_BLOCK:
        return None
    end = raw.get("EndDate")
    return CapacityBlock(raw["CapacityReservationId"], parse_time(end) if end else None, str(raw.get("State", "")),
                         str(raw.get("InstanceType", "")), str(raw.get("AvailabilityZone", "")))
