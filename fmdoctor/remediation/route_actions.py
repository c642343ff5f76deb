"""Route fixes: ``create-route``, ``replace-route`` and ``modify-vpc-endpoint`` (a route table added to an
existing S3 gateway endpoint), and how the current state already satisfies or contradicts each.

The hints come from the reachability engine (:mod:`fmdoctor.net.route_fix`) and name only targets the VPC
already has; they are still validated field by field here, because whatever they say is sent to AWS.
All three are EC2 calls with ``DryRun``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from fmdoctor.engine.aws import Aws
from fmdoctor.engine.discovery import FILTER_VALUES_MAX
from fmdoctor.engine.inventory import chunked

_ROUTE_TABLE_ID = re.compile(r"^rtb-[0-9a-f]{8,17}$")
_TARGETS = {  # hint key -> (EC2 parameter, id pattern)
    "gateway_id": ("GatewayId", re.compile(r"^igw-[0-9a-f]{8,17}$")),
    "nat_gateway_id": ("NatGatewayId", re.compile(r"^nat-[0-9a-f]{8,17}$")),
}
_ENDPOINT_ID = re.compile(r"^vpce-[0-9a-f]{8,17}$")

Verdict = tuple[str, str] | None


class HintError(ValueError):
    """A route hint that does not validate (the caller names the hint in its error)."""


def _id(hint: Mapping[str, Any], key: str, pattern: re.Pattern[str]) -> str:
    value = hint.get(key)
    if not isinstance(value, str) or not pattern.match(value):
        raise HintError(f"{key} must match {pattern.pattern}")
    return value


def route_params(hint: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """CreateRoute / ReplaceRoute parameters and a summary: one table, one IPv4 CIDR, one gateway."""
    table = _id(hint, "route_table_id", _ROUTE_TABLE_ID)
    try:
        destination = str(ipaddress.IPv4Network(str(hint.get("destination")), strict=True))
    except ValueError as exc:
        raise HintError(f"destination must be an IPv4 CIDR: {exc}") from None
    targets = [k for k in _TARGETS if hint.get(k) is not None]
    if len(targets) != 1:
        raise HintError(f"needs exactly one of {', '.join(_TARGETS)}")
    parameter, pattern = _TARGETS[targets[0]]
    target = _id(hint, targets[0], pattern)
    verb = "add" if hint.get("action") == "create-route" else "replace"
    return ({"RouteTableId": table, "DestinationCidrBlock": destination, parameter: target},
            f"{verb} route {destination} -> {target} in {table}")


def endpoint_params(hint: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """ModifyVpcEndpoint parameters that only add route tables (nothing is removed, no policy changes)."""
    endpoint = _id(hint, "vpc_endpoint_id", _ENDPOINT_ID)
    tables = hint.get("add_route_table_ids")
    if not isinstance(tables, list) or not tables or len(tables) > 20:
        raise HintError("add_route_table_ids must be a list of 1 to 20 route table ids")
    for table in tables:
        if not isinstance(table, str) or not _ROUTE_TABLE_ID.match(table):
            raise HintError(f"add_route_table_ids: {table!r} must match {_ROUTE_TABLE_ID.pattern}")
    return ({"VpcEndpointId": endpoint, "AddRouteTableIds": list(tables)},
            f"add {', '.join(tables)} to gateway endpoint {endpoint} (its prefix-list route)")


def judge_routes(aws: Aws, calls: list[Any]) -> dict[int, Verdict]:
    """Satisfied when the table already routes the destination to that target; a CreateRoute whose destination
    is taken by another target, or a ReplaceRoute with nothing to replace, is a conflict."""
    ec2 = aws.client("ec2")
    tables: dict[str, list[dict[str, Any]]] = {}
    for batch in chunked(sorted({c.params["RouteTableId"] for c in calls}), FILTER_VALUES_MAX):
        pages = ec2.get_paginator("describe_route_tables").paginate(
            Filters=[{"Name": "route-table-id", "Values": batch}])
        for page in pages:
            for table in page.get("RouteTables", []):
                tables[table["RouteTableId"]] = table.get("Routes", [])
    verdicts: dict[int, Verdict] = {}
    for index, call in enumerate(calls):
        p = call.params
        routes = tables.get(p["RouteTableId"])
        if routes is None:
            verdicts[index] = ("conflict", f"route table {p['RouteTableId']} no longer exists")
            continue
        current = next((r for r in routes if r.get("DestinationCidrBlock") == p["DestinationCidrBlock"]), None)
        target_key = next(k for k in ("GatewayId", "NatGatewayId") if k in p)
        if current is not None and current.get(target_key) == p[target_key] and current.get("State") != "blackhole":
            verdicts[index] = ("satisfied", f"{p['DestinationCidrBlock']} already routes to {p[target_key]}")
        elif current is not None and call.operation == "CreateRoute":
            other = next((v for k, v in current.items() if k.endswith("Id") and k != "DestinationPrefixListId"),
                         "another target")
            verdicts[index] = ("conflict", f"{p['RouteTableId']} already routes {p['DestinationCidrBlock']} to "
                                           f"{other}; replace that route instead")
        elif current is None and call.operation == "ReplaceRoute":
            verdicts[index] = ("conflict", f"{p['RouteTableId']} has no route for {p['DestinationCidrBlock']} "
                                           "to replace")
    return verdicts


def judge_endpoints(aws: Aws, calls: list[Any]) -> dict[int, Verdict]:
    """Satisfied when every table is already associated with the endpoint; a gone endpoint is a conflict."""
    ec2 = aws.client("ec2")
    associated: dict[str, set[str]] = {}
    for endpoint_id in sorted({c.params["VpcEndpointId"] for c in calls}):  # one or two: the S3 gateway
        try:
            found = ec2.describe_vpc_endpoints(VpcEndpointIds=[endpoint_id]).get("VpcEndpoints", [])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "InvalidVpcEndpointId.NotFound":
                raise
            found = []
        for endpoint in found:
            if str(endpoint.get("State", "")).lower() not in ("deleted", "deleting"):
                associated[endpoint["VpcEndpointId"]] = set(endpoint.get("RouteTableIds") or [])
    verdicts: dict[int, Verdict] = {}
    for index, call in enumerate(calls):
        p = call.params
        have = associated.get(p["VpcEndpointId"])
        if have is None:
            verdicts[index] = ("conflict", f"VPC endpoint {p['VpcEndpointId']} no longer exists")
        elif set(p["AddRouteTableIds"]) <= have:
            verdicts[index] = ("satisfied", f"{', '.join(p['AddRouteTableIds'])} already use {p['VpcEndpointId']}")
    return verdicts
