"""Turn what a person types (``gpu-node-6``, ``i-0abc``, ``10.0.3.7``, ``203.0.113.0/24``, ``eni-...``,
``internet``, ``fs-0123...``, ``s3://bucket``) into endpoints, fetching only what the inventory lacks.

Resolution order (the first that matches wins; :data:`ORDER` is what a no-match message lists):

1. an instance by any of its names (:mod:`fmdoctor.engine.identity`: ``Name`` tag, id, private DNS name such
   as ``ip-10-0-1-12.ec2.internal`` or ``ip-10-0-1-12``), or ``head``/``head-node`` for the cluster's head node;
   an EC2 hostname of no instance of the cluster is the interface with the address it spells;
2. an IPv4 address or CIDR (an address of an interface is that interface; ``internet``, ``any`` and
   ``0.0.0.0/0`` are the internet);
3. a network interface id (``eni-...``);
4. an FSx file system (``fs-...``), ``s3`` (S3 in the region) or ``s3://bucket[/prefix]``.

A bucket is accepted only as ``s3://bucket``, so a mistyped node name is never read as one. Nothing
matched: the message says what was tried and which names are close ("did you mean gpu-node-6?").

Interfaces outside the cluster (a file system's, an endpoint's, any the user names) are fetched by id or
filter in one call each, with their security groups and any VPC that is not loaded yet.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

from botocore.exceptions import ClientError

from fmdoctor.config import validate_checkpoint_location
from fmdoctor.engine.errors import TargetNotFound, UsageError
from fmdoctor.engine.identity import INTERFACE_ID, IPV4, IPV6, PUBLIC_IP, SHORT_DNS, NodeIdentities, ip_of_hostname
from fmdoctor.engine.inventory import HEAD, Inventory, NetworkInterface
from fmdoctor.net import replies
from fmdoctor.net.fetch import fetch_interfaces, fetch_missing_groups, fetch_prefix_lists, fetch_topology
from fmdoctor.net.model import ClientPorts, Endpoint
from fmdoctor.net.network import INTERNET, Network, group_interfaces, primary_interface
from fmdoctor.net.space import address_range, cidr_range, ranges_overlap
from fmdoctor.net.topology import Topology
from fmdoctor.words import suggest

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8,17}$")
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_INTERFACE_ID = re.compile(r"^eni-[0-9a-f]{8,17}$")
HEAD_WORDS = ("head", "head-node")
ORDER = ("an instance's Name tag, id or DNS name ({count} instances), 'head', an IPv4 address or CIDR, 'internet', "
         "an ENI id, an FSx id, 's3' or s3://bucket")
_FSX = re.compile(r"^(?:fsx://)?(fs-[0-9a-f]{8,17})(?:/.*)?$")
LUSTRE_PORTS = ((988, 988), (1018, 1023))
HTTPS = ((443, 443),)


@dataclasses.dataclass
class Resolved:
    """Endpoints for one input (an FSx file system has several interface classes) and the ports it implies."""

    endpoints: list[Endpoint]
    default_ports: tuple[tuple[int, int], ...] | None = None
    clients: tuple[ClientPorts, ...] | None = None  # whose ports replies go to (Lustre: LNet's 1018-1023)


class Resolver:
    def __init__(self, network: Network, inventory: Inventory, clients: dict[str, Any] | None = None):
        self.network = network
        self.inventory = inventory
        self.clients = clients or {}

    # -- public --------------------------------------------------------------------------------------

    def resolve(self, text: str) -> Resolved:
        query = (text or "").strip()
        if not query:
            raise UsageError("an empty endpoint: give an instance, ENI, IP, CIDR, 'internet', fs-id or s3://bucket")
        lowered = query.lower()
        named = self._named_instance(query)
        if named is not None:
            return Resolved([named])
        if _INSTANCE_ID.match(lowered):
            return Resolved([self._instance(query)])
        if lowered in ("internet", "0.0.0.0/0", "any"):
            return Resolved([Endpoint("internet", "the internet", "internet", INTERNET, query=query)])
        if _is_network(query):
            return Resolved([self._address(query)])
        if _INTERFACE_ID.match(lowered):
            return Resolved([self._interface_by_id(query)])
        if match := _FSX.match(lowered):
            return self._file_system(match.group(1), query)
        if lowered == "s3" or lowered.startswith("s3://"):
            return Resolved([self._s3(query)], HTTPS)
        if _SECURITY_GROUP.match(lowered):
            raise UsageError(f"{query} is a security group, not an endpoint: name an instance, interface or address "
                             "that uses it")
        if lowered in HEAD_WORDS:
            raise TargetNotFound(f"cluster {self.inventory.cluster} has no known head node",
                                 hint="tag it fmdoctor:role=head or list it under head_nodes in fmdoctor.yaml")
        raise self._not_found(query)

    def _not_found(self, query: str) -> TargetNotFound:
        """What was tried, in order, and the names that are close to the query."""
        shown = query if len(query) <= 80 else f"{query[:77]}..."
        names = NodeIdentities.of(self.inventory).all_names()
        close = suggest(query, [n for n in names if n] + ["internet", "s3"]) if len(query) <= 256 else []
        if close:
            hint: str | None = f"did you mean {close[0]}?" + (f" (also close: {', '.join(close[1:])})"
                                                                if close[1:] else "")
        else:
            hint = f"a bucket is named as s3://{query}" if _BUCKET.match(query) else None
        count = len(self.inventory.instances)
        return TargetNotFound(f"{shown!r} is not an instance, address, interface, file system or s3:// URI of cluster "
                              f"{self.inventory.cluster} (tried, in order: {ORDER.format(count=count)})", hint=hint)

    # -- instances and interfaces ----------------------------------------------------------------------

    def _named_instance(self, name: str) -> Endpoint | None:
        """A node by any name the identity resolver knows (Name tag, id, private DNS name full or short under
        any domain, interface id, HyperPod node name); a DNS name that spells an address outside the
        cluster is the interface with that address."""
        if name.lower() in HEAD_WORDS and (heads := [i for i in self.inventory.instances if i.role == HEAD]):
            return self._instance(heads[0].id, name)
        match = NodeIdentities.of(self.inventory).resolve(name)
        if match.ambiguous:
            raise UsageError(f"{len(match.candidates)} instances go by {name!r} ({match.via}): give an instance id",
                             hint=", ".join(i.id for i in match.candidates[:5]))
        if match.via in (IPV4, IPV6, PUBLIC_IP, INTERFACE_ID):  # the interface itself: see resolve's order
            return None
        address = ip_of_hostname(name.strip())
        if address is not None and match.via == SHORT_DNS:  # the interface that has the address the name spells
            eni = self._interface_with_ip(address)
            if eni is not None:
                return self.network.interface_endpoint(eni, name)
            if match.instance is None:
                raise TargetNotFound(f"no network interface has {address}, the address {name!r} spells")
        return self._instance(match.instance.id, name) if match.instance is not None else None

    def _instance(self, instance_id: str, query: str = "") -> Endpoint:
        instance = self.inventory.instance(instance_id)
        if instance is not None:
            eni = primary_interface(self.inventory.interfaces_of(instance))
        else:
            found = self._fetch_interfaces(filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])
            eni = primary_interface(list(found.values()))
        if eni is None:
            raise TargetNotFound(f"instance {instance_id} has no network interface (is it running, in this region?)")
        return self.network.interface_endpoint(eni, query or instance_id)

    def _interface_by_id(self, eni_id: str) -> Endpoint:
        eni = self.network.interfaces.get(eni_id) or self._fetch_interfaces(ids=[eni_id]).get(eni_id)
        if eni is None:
            raise TargetNotFound(f"network interface {eni_id} does not exist in {self.network.topology.region}")
        return self.network.interface_endpoint(eni, eni_id)

    def _address(self, text: str) -> Endpoint:
        network = ipaddress.ip_network(text, strict=False)
        if network.version != 4:
            raise UsageError(f"{text}: IPv6 flows are not evaluated yet")
        ranges = (cidr_range(str(network)),)
        if network.num_addresses == 1:
            ip = str(network.network_address)
            eni = self._interface_with_ip(ip)
            if eni is not None:
                return self.network.interface_endpoint(eni, text)
        topology = self.network.topology
        inside = [v for v in topology.vpc_ids if ranges_overlap(ranges, topology.vpc_ranges(v))]
        if inside and network.num_addresses == 1:
            raise TargetNotFound(f"no network interface has {text} in {inside[0]}")
        if inside:
            raise UsageError(f"{text} overlaps {inside[0]}: name an instance, interface or address inside the VPC")
        kind = "cidr"
        return Endpoint(kind, str(network), str(network), ranges, query=text)

    def _interface_with_ip(self, ip: str) -> NetworkInterface | None:
        for eni in self.network.interfaces.values():
            if ip in eni.private_ips or ip == eni.public_ip:
                return eni
        if not self.clients:
            return None
        public = ranges_overlap([address_range(ip)], INTERNET)
        name = "association.public-ip" if public else "addresses.private-ip-address"
        found = self._fetch_interfaces(filters=[{"Name": name, "Values": [ip]}])
        return next(iter(found.values()), None)

    def _fetch_interfaces(self, ids: list[str] | None = None, filters: list[dict[str, Any]] | None = None
                          ) -> dict[str, NetworkInterface]:
        ec2 = self.clients.get("ec2")
        if ec2 is None:
            return {}
        found = fetch_interfaces(ec2, ids=ids or (), filters=filters or ())
        self.add_interfaces(found.values())
        return found

    def add_interfaces(self, interfaces: Any) -> None:
        """Make interfaces (and their groups and VPCs) part of the network the evaluation reads."""
        interfaces = list(interfaces)
        ec2 = self.clients.get("ec2")
        groups = {}
        topology: Topology | None = None
        if ec2 is not None:
            groups = fetch_missing_groups(ec2, {g for e in interfaces for g in e.security_group_ids},
                                          self.network.security_groups)
            new_vpcs = {e.vpc_id for e in interfaces if e.vpc_id} - set(self.network.topology.vpc_ids)
            if new_vpcs:
                extra = fetch_topology(ec2, self.network.topology.region, sorted(new_vpcs), groups.values())
                topology = merge_topologies(self.network.topology, extra)
            lists = {r.prefix_list_id for g in groups.values() for r in g.rules if r.prefix_list_id}
            missing_lists = sorted(lists - set((topology or self.network.topology).prefix_lists))
            prefix_lists = fetch_prefix_lists(ec2, missing_lists) if missing_lists else {}
        else:
            prefix_lists = {}
        self.network = self.network.with_extras(interfaces, groups, prefix_lists, topology)

    # -- FSx and S3 ----------------------------------------------------------------------------------------

    def _file_system(self, fs_id: str, query: str) -> Resolved:
        fsx = self.clients.get("fsx")
        if fsx is None:
            raise TargetNotFound(f"file system {fs_id} cannot be looked up without AWS access")
        try:
            systems = fsx.describe_file_systems(FileSystemIds=[fs_id]).get("FileSystems", [])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "FileSystemNotFound":
                raise
            systems = []
        if not systems:
            raise TargetNotFound(f"FSx file system {fs_id} does not exist in {self.network.topology.region}")
        system = systems[0]
        ids = list(system.get("NetworkInterfaceIds", []))
        found = self._fetch_interfaces(ids=ids) if ids else {}
        if not found:
            raise TargetNotFound(f"FSx file system {fs_id} reports no network interfaces")
        endpoints = file_system_endpoints(self.network, fs_id, system.get("FileSystemType", ""), found.values(), query)
        lustre = system.get("FileSystemType") == "LUSTRE"
        return Resolved(endpoints, LUSTRE_PORTS if lustre else None, (replies.LUSTRE,) if lustre else None)

    def _s3(self, text: str) -> Endpoint:
        region = self.network.topology.region
        bucket = None
        if text.lower() != "s3":
            try:
                validate = validate_checkpoint_location(text)
            except ValueError as exc:
                raise UsageError(str(exc), hint="an S3 endpoint is 's3' (the regional service) or s3://BUCKET") \
                    from None
            bucket = validate[5:].split("/", 1)[0]
        if bucket and directory_bucket_zone(bucket):
            return s3express_endpoint(self.network, bucket, text)  # GetBucketLocation does not take it
        bucket_region = bucket_region_of(self.clients.get("s3"), bucket) if bucket else region
        endpoint = s3_endpoint(self.network, bucket, bucket_region or region, text)
        if bucket_region is None:
            endpoint = dataclasses.replace(endpoint, label=f"{endpoint.label} (its region could not be read; "
                                           f"{region} assumed)")
        return endpoint


def file_system_endpoints(network: Network, fs_id: str, fs_type: str, interfaces: Any, query: str = ""
                          ) -> list[Endpoint]:
    """A file system's interfaces as classes (same subnet and groups): Lustre spreads over many ENIs."""
    endpoints = []
    for (subnet, _, _), members in group_interfaces(interfaces, by_public_ip=False).items():
        count = f"{len(members)} interfaces" if len(members) > 1 else members[0].id
        label = f"FSx {fs_type.lower() or 'file system'} {fs_id} ({count} in {subnet})"
        endpoints.append(dataclasses.replace(network.class_endpoint(members, label, fs_id), query=query or fs_id))
    return endpoints


def s3_endpoint(network: Network, bucket: str | None, bucket_region: str, query: str = "s3") -> Endpoint:
    """S3 as a destination: its prefix list's CIDRs in this region, else (another region) the internet."""
    same_region = bucket_region == network.topology.region
    prefix_list = network.topology.s3_prefix_list() if same_region else None
    label = f"s3://{bucket}" if bucket else f"S3 ({bucket_region})"
    if bucket and not same_region:
        label += f" in {bucket_region}"
    if prefix_list is not None and prefix_list.ranges:
        return Endpoint("s3", label, f"s3://{bucket}" if bucket else f"s3.{bucket_region}", prefix_list.ranges,
                        prefix_list_ids=frozenset({prefix_list.id}), query=query, bucket=bucket,
                        bucket_region=bucket_region)
    return Endpoint("s3", label, f"s3://{bucket}" if bucket else f"s3.{bucket_region}", INTERNET, query=query,
                    bucket=bucket, bucket_region=bucket_region)


_DIRECTORY_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]*--([a-z0-9]+-(?:az|[a-z]+\d*-az)\d+)--x-s3$")


def directory_bucket_zone(bucket: str) -> str | None:
    """The zone id in an S3 Express One Zone directory bucket's name (``base--usw2-az1--x-s3``), else None.

    The S3 guide (directory-bucket-naming-rules.html): "A directory bucket name consists of a base name that you
    provide, and a suffix that contains the ID of the AWS Zone (an Availability Zone or a Local Zone) that your
    bucket is located in and --x-s3." GetBucketLocation is not supported for directory buckets (API reference),
    so the zone in the name is all there is to go by."""
    match = _DIRECTORY_BUCKET.match(bucket)
    return match.group(1) if match else None


def s3express_endpoint(network: Network, bucket: str, query: str = "") -> Endpoint:
    """A directory bucket as a destination: reached through an ``s3express`` gateway endpoint (its prefix list)
    or over the internet to its zonal endpoint (S3 guide, s3-express-networking.html). Its region is the
    cluster's when the zone id is one of the region's (the subnets' AvailabilityZoneId prefix), else unknown."""
    zone = directory_bucket_zone(bucket) or "?"
    topology = network.topology
    region_prefixes = {s.availability_zone_id.split("-", 1)[0] for s in network.subnets.values()
                       if s.availability_zone_id}
    same_region = zone.split("-", 1)[0] in region_prefixes
    region = topology.region if same_region else None
    label = f"s3://{bucket} (S3 Express One Zone, {zone}" + ("" if same_region else ", outside this region") + ")"
    prefix_list = topology.s3_prefix_list("s3express") if same_region else None
    common: dict[str, Any] = {"query": query or f"s3://{bucket}", "bucket": bucket, "bucket_region": region,
                              "service": "s3express"}
    if prefix_list is not None and prefix_list.ranges:
        return Endpoint("s3", label, f"s3://{bucket}", prefix_list.ranges,
                        prefix_list_ids=frozenset({prefix_list.id}), **common)
    return Endpoint("s3", label, f"s3://{bucket}", INTERNET, **common)


def bucket_region_of(s3: Any, bucket: str | None) -> str | None:
    """The bucket's region (GetBucketLocation); None when it cannot be read (the cluster's region is assumed)."""
    if s3 is None or not bucket:
        return None
    try:
        location = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
            raise TargetNotFound(f"S3 bucket {bucket} does not exist") from None
        return None  # denied or elsewhere: the caller says the region was assumed
    return location or "us-east-1"


def merge_topologies(a: Topology, b: Topology) -> Topology:
    merged = {f.name: {**getattr(a, f.name), **getattr(b, f.name)}
              for f in dataclasses.fields(Topology) if isinstance(getattr(a, f.name), dict)}
    return Topology(region=a.region, vpc_ids=tuple(sorted({*a.vpc_ids, *b.vpc_ids})), **merged)


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True
