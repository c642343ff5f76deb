"""DescribeInstances, page by page, keeping only what discovery reads.

A p5 node lists 32 EFA interfaces and more: 8 MB of XML per 256 nodes. botocore turns a whole page into an
element tree and then into nested dicts of every field (about 6x the XML in memory, and most of the client's
CPU), and a paginator keeps the page it yielded alive while it fetches the next. Here each page's XML is read
as a stream (``before-parse``): an instance's elements are dropped as soon as the few fields discovery reads
(:data:`INSTANCE_FIELDS`, :data:`INTERFACE_FIELDS`, under botocore's own key names) are taken from them, and
botocore parses only the page's token. Pages ask for AWS's 1,000 instances: each page is a round trip
one after another (NextToken), and a page of 1,000 p5 nodes (33 interfaces each, 26 MB of XML) peaks at
41 MiB of Python allocations in this reader (bench/listing_memory.py; 11 MiB for 250), well inside the
inventory's 300 MiB goal at 2,048 p5 nodes. Only a denser layout than p5's would page smaller: a page asks
for at most :data:`INTERFACES_PER_PAGE` interfaces' worth of instances.

Without a body to read (botocore's Stubber) the response is parsed by botocore as usual and read the same way.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any, cast
from xml.etree.ElementTree import Element, ParseError, XMLPullParser

from fmdoctor.engine.responses import CorruptResponse, check_response
from fmdoctor.engine.timestamps import parse_timestamp

PAGE_MAX = 1000  # DescribeInstances' MaxResults: 5 to 1,000
PAGE_MIN = 5
FIRST_PAGE = PAGE_MAX  # before the density is known: a page of p5 nodes is measured (see above)
INTERFACES_PER_PAGE = 33_000  # 1,000 p5 nodes of 33 interfaces
FEED_BYTES = 1 << 16

# botocore key -> XML element, for what discovery reads (EC2's query protocol names, from botocore's model).
INSTANCE_FIELDS = {
    "InstanceId": "instanceId", "InstanceType": "instanceType", "SubnetId": "subnetId", "VpcId": "vpcId",
    "PrivateIpAddress": "privateIpAddress", "PrivateDnsName": "privateDnsName", "PublicIpAddress": "ipAddress",
    "InstanceLifecycle": "instanceLifecycle",
    "SpotInstanceRequestId": "spotInstanceRequestId", "CapacityBlockId": "capacityBlockId",
    "CapacityReservationId": "capacityReservationId", "Platform": "platform",
}
INTERFACE_FIELDS = {
    "NetworkInterfaceId": "networkInterfaceId", "SubnetId": "subnetId", "VpcId": "vpcId",
    "PrivateIpAddress": "privateIpAddress", "InterfaceType": "interfaceType", "Description": "description",
}
# Only the calls made inside read_instance_pages() in this thread are read this way.
_active = threading.local()
_HANDLER_ID = "fmdoctor-instance-listing"


def read_instance_pages(ec2: Any, filters: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The listing's reservations, one page at a time (botocore's shape, slimmed to what discovery reads).

    Each page's list is emptied once the caller asks for the next, so at most one page is ever held."""
    ec2.meta.events.register("before-parse.ec2.DescribeInstances", _read_page, unique_id=_HANDLER_ID)
    size, token = FIRST_PAGE, None
    seen_instances = seen_interfaces = 0
    while True:
        kwargs: dict[str, Any] = {"Filters": filters, "MaxResults": size}
        if token:
            kwargs["NextToken"] = token
        _active.reading = True
        try:
            page = ec2.describe_instances(**kwargs)
        finally:
            _active.reading = False
        reservations = page.get("Reservations", [])
        token = page.get("NextToken")
        del page
        instances = [i for r in reservations for i in r.get("Instances", [])]
        seen_instances += len(instances)
        seen_interfaces += sum(len(i.get("NetworkInterfaces", ())) for i in instances)
        del instances
        yield reservations
        reservations.clear()
        if not token:
            return
        size = page_size(seen_instances, seen_interfaces)


def page_size(instances: int, interfaces: int) -> int:
    """Instances a page may ask for, given the interfaces per instance seen so far."""
    if not instances:
        return PAGE_MAX
    per_instance = max(1.0, interfaces / instances)
    return max(PAGE_MIN, min(PAGE_MAX, int(INTERFACES_PER_PAGE / per_instance)))


def _read_page(response_dict: dict[str, Any], customized_response_dict: dict[str, Any], operation_model: Any = None,
               **_: Any) -> None:
    """before-parse: read a successful page's body here, and leave botocore only its token to parse.

    This handler is registered for ``before-parse.ec2.DescribeInstances``, which botocore calls before the
    session-wide ``before-parse`` handlers, so the page is proven whole here (:func:`check_response`) before a
    byte of it is read, and XML broken inside is a :class:`CorruptResponse`, never a half-read listing. The
    body left for botocore is the stub, with a Content-Length that says so."""
    if not getattr(_active, "reading", False) or response_dict.get("status_code") != 200:
        return
    body = response_dict.get("body")
    if not isinstance(body, bytes | bytearray) or not body:
        return
    if operation_model is not None:
        check_response(operation_model, response_dict)
    try:
        reservations, token, request_id, root = parse_listing(body)
    except ParseError as exc:
        raise CorruptResponse(operation="ec2.DescribeInstances", problem=f"XML that does not parse: {exc}") from None
    customized_response_dict["Reservations"] = reservations
    stub = f"<{root}>" + (f"<requestId>{request_id}</requestId>" if request_id else "")
    stub += (f"<nextToken>{_xml_text(token)}</nextToken>" if token else "") + f"</{root.split()[0]}>"
    response_dict["body"] = stub.encode()
    headers = response_dict.get("headers")
    if headers is not None and any(k.lower() == "content-length" for k in list(headers)):
        for key in [k for k in list(headers) if k.lower() == "content-length"]:
            del headers[key]
        headers["content-length"] = str(len(response_dict["body"]))


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def parse_listing(body: bytes | bytearray) -> tuple[list[dict[str, Any]], str | None, str | None, str]:
    """(reservations, next token, request id, root element's opening tag text) of one DescribeInstances page.

    ``instancesSet``, ``nextToken`` and ``requestId`` occur nowhere else in the response, so their end tags
    alone say where a reservation's instances are complete and where the page's own fields are."""
    parser: XMLPullParser[Element] = XMLPullParser(events=("end",))
    reservations: list[dict[str, Any]] = []
    token = request_id = None
    ns = None
    elem: Element | None = None
    for offset in range(0, len(body), FEED_BYTES):
        parser.feed(body[offset:offset + FEED_BYTES])
        for event in parser.read_events():
            _, elem = cast("tuple[str, Element]", event)  # only "end" events were asked for: each is an element
            tag = elem.tag
            if ns is None:  # the first element to end is one of the root's descendants: it names the namespace
                ns = tag[: tag.index("}") + 1] if tag.startswith("{") else ""
                instances_set, next_token, request = f"{ns}instancesSet", f"{ns}nextToken", f"{ns}requestId"
            if tag == instances_set:
                reservations.append({"Instances": [_instance(i, ns) for i in elem]})
                elem.clear()  # its instances are read: drop their elements
            elif tag == next_token:
                token = elem.text or None
            elif tag == request:
                request_id = elem.text
    parser.close()
    return reservations, token, request_id, _opening(elem, ns or "")  # the last element to end is the root


def _opening(root: Element | None, ns: str) -> str:
    local = root.tag[len(ns):] if root is not None else "DescribeInstancesResponse"
    return f'{local} xmlns="{ns[1:-1]}"' if ns else local


def _fields(elem: Element, ns: str, names: dict[str, str]) -> dict[str, Any]:
    out = {}
    for key, tag in names.items():
        text = elem.findtext(ns + tag)
        if text is not None:
            out[key] = text
    return out


def _instance(elem: Element, ns: str) -> dict[str, Any]:
    raw = _fields(elem, ns, INSTANCE_FIELDS)
    state = elem.findtext(f"{ns}instanceState/{ns}name")
    if state is not None:
        raw["State"] = {"Name": state}
    placement = elem.find(ns + "placement")
    if placement is not None:
        raw["Placement"] = _fields(placement, ns, {"AvailabilityZone": "availabilityZone", "GroupName": "groupName"})
    launched = elem.findtext(ns + "launchTime")
    if launched:
        raw["LaunchTime"] = parse_timestamp(launched)
    tags = elem.find(ns + "tagSet")
    if tags is not None:
        raw["Tags"] = [_fields(t, ns, {"Key": "key", "Value": "value"}) for t in tags]
    enis = elem.find(ns + "networkInterfaceSet")
    if enis is not None:
        raw["NetworkInterfaces"] = [_interface(e, ns) for e in enis]
    return raw


def _interface(elem: Element, ns: str) -> dict[str, Any]:
    raw = _fields(elem, ns, INTERFACE_FIELDS)
    groups = elem.find(ns + "groupSet")
    if groups is not None:
        raw["Groups"] = [{"GroupId": g.findtext(ns + "groupId")} for g in groups]
    addresses = elem.find(ns + "privateIpAddressesSet")
    if addresses is not None:
        raw["PrivateIpAddresses"] = [_fields(a, ns, {"PrivateIpAddress": "privateIpAddress"}) for a in addresses]
    association = elem.find(ns + "association")
    if association is not None:
        raw["Association"] = _fields(association, ns, {"PublicIp": "publicIp"})
    attachment = elem.find(ns + "attachment")
    if attachment is not None:
        raw["Attachment"] = {key: int(text) for key, tag in (("DeviceIndex", "deviceIndex"),
                                                              ("NetworkCardIndex", "networkCardIndex"))
                             if (text := attachment.findtext(ns + tag)) is not None and _INT.fullmatch(text)}
    return raw


_INT = re.compile(r"-?\d+")
