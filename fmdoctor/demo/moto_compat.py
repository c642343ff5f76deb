"""Teach moto the few EC2/FSx facts the checks read and moto drops, so the demo looks like real AWS.

moto ignores ``InterfaceType`` and ``NetworkCardIndex`` of network interfaces (and gives an EFA-only
interface an IP address, which AWS does not), ``Placement.GroupName``
of instances, launches every instance with market options as Spot (a ``capacity-block`` market type too) and
drops its ``CapacityReservationId``, has no ``s3express`` managed prefix list (so an S3 Express gateway endpoint
gets no route), has no placement-group API, gives FSx file systems no network interfaces, computes no
CloudWatch percentiles (p90, p99), ignores ``DryRun`` on CreateNetworkAclEntry (it would really create the
entry during a pre-flight), lacks the ``network-acl-id`` filter of DescribeNetworkAcls and lets a
security-group rule that differs only in its description in as a second rule (AWS answers
``InvalidPermission.Duplicate``); the interfaces it makes for an interface VPC endpoint get a random address
outside their subnet and the VPC's default group instead of the endpoint's groups; it draws each interface's
address at random with no look at the addresses already in use, so two instances of one subnet can share an
address (in AWS a private IPv4 address belongs to one interface of its subnet); DescribeNetworkInterfaces
lacks the ``association.public-ip`` filter; its CloudWatch lists multi-dimension series once per datapoint
and answers GetMetricData in quadratic time (``moto_cloudwatch``). Scenario
builders make ordinary boto3 calls (they would work against real AWS); this module makes moto honour
those parameters (and :mod:`fmdoctor.demo.moto_health` the Spot and HyperPod bits, :mod:`fmdoctor.demo.moto_routes`
the route fixes). Real AWS needs none
of it. :func:`install` is idempotent and patches classes only.
"""

from __future__ import annotations

import contextvars
import functools
import ipaddress
import threading
from collections.abc import Mapping
from typing import Any

from fmdoctor.demo import moto_cloudwatch, moto_health, moto_routes, moto_speed

_installed = False
_lock = threading.Lock()
# The addresses in use in the subnet whose interface is being made (None outside NetworkInterface.__init__).
_subnet_addresses: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("fmdoctor_subnet_addresses",
                                                                                    default=None)
FREE_ADDRESS_DRAWS = 64  # a subnet this full is not the demo's; then moto's draw stands, as before


def install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _patch_network_interfaces()
        _patch_unique_addresses()
        _patch_instance_placement()
        _add_s3express_prefix_list()
        _add_placement_group_api()
        _patch_fsx_interfaces()
        _patch_dry_run()
        _patch_rule_duplicates()
        _add_network_acl_id_filter()
        moto_health.install()
        moto_cloudwatch.install()
        _patch_cloudwatch_percentiles()  # after moto_cloudwatch: it wraps the GetMetricData installed there
        _patch_endpoint_interfaces()
        moto_routes.install()
        moto_speed.install()
        _installed = True


def _patch_network_interfaces() -> None:
    from moto.ec2.models import elastic_network_interfaces as eni_models
    from moto.ec2.models.instances import Instance
    from moto.ec2.responses.elastic_network_interfaces import ElasticNetworkInterfaces

    original_prep = Instance.prep_nics

    @functools.wraps(original_prep)
    def prep_nics(self: Any, nic_spec: list[dict[str, Any]], *args: Any, **kwargs: Any) -> None:
        original_prep(self, nic_spec, *args, **kwargs)
        for spec in nic_spec or []:
            nic = self.nics.get(int(spec.get("DeviceIndex", 0)))
            if nic is None:
                continue
            if spec.get("InterfaceType"):
                nic.interface_type = spec["InterfaceType"]
            if spec.get("InterfaceType") == "efa-only":  # "the EFA device is not assigned an IP address"
                nic.private_ip_address = None
                nic.private_ip_addresses = []
            nic._fmdoctor_card = int(spec.get("NetworkCardIndex", 0) or 0)

    Instance.prep_nics = prep_nics

    original_attachment_init = eni_models.Attachment.__init__

    @functools.wraps(original_attachment_init)
    def attachment_init(self: Any, eni: Any) -> None:
        original_attachment_init(self, eni)
        self.network_card_index = getattr(eni, "_fmdoctor_card", 0)

    eni_models.Attachment.__init__ = attachment_init

    original_create = ElasticNetworkInterfaces.create_network_interface

    @functools.wraps(original_create)
    def create_network_interface(self: Any) -> Any:
        result = original_create(self)
        interface_type = self._get_param("InterfaceType")
        if interface_type:
            result.result["NetworkInterface"].interface_type = interface_type
        return result

    ElasticNetworkInterfaces.create_network_interface = create_network_interface

    original_filter = eni_models.NetworkInterface.get_filter_value

    @functools.wraps(original_filter)
    def get_filter_value(self: Any, filter_name: str, method_name: str | None = None) -> Any:
        if filter_name == "association.public-ip":
            return self.public_ip
        return original_filter(self, filter_name, method_name)

    eni_models.NetworkInterface.get_filter_value = get_filter_value


def addresses_in_use(subnet: Any) -> dict[str, Any]:
    """The private IPv4 addresses in use in a moto subnet: moto's own register of its instances' addresses
    (``Subnet._subnet_ips``, which its sequential draw for a launch skips), which the interfaces' addresses join."""
    return subnet._subnet_ips  # type: ignore[no-any-return]


def free_address(cidr: str, taken: Mapping[str, Any], draw: Any) -> str:
    """moto's random draw in ``cidr``, drawn again while the address is in use or one AWS reserves (the first four
    and the last of a subnet, https://docs.aws.amazon.com/vpc/latest/userguide/subnet-sizing.html)."""
    network = ipaddress.IPv4Network(cidr)
    reserved = {str(network.network_address + n) for n in range(4)} | {str(network.broadcast_address)}
    address = str(draw(cidr))
    for _ in range(FREE_ADDRESS_DRAWS):
        if address not in taken and address not in reserved:
            break
        address = str(draw(cidr))
    return address


def _patch_unique_addresses() -> None:
    """One interface per address in a subnet, as AWS assigns them: moto's draws while an interface is made see
    the subnet's addresses in use, and every address an interface ends up with (asked for or drawn) is marked."""
    from moto.ec2.models import elastic_network_interfaces as eni_models

    moto_draw = eni_models.random_private_ip

    def random_private_ip(cidr: str | None = None, ipv6: bool = False) -> str:
        taken = _subnet_addresses.get()
        if taken is None or ipv6 or not cidr:
            return str(moto_draw(cidr, ipv6=ipv6))
        address = free_address(cidr, taken, moto_draw)
        taken.setdefault(address, None)  # before the next draw of the same interface (its secondary addresses)
        return address

    eni_models.random_private_ip = random_private_ip
    original_init = eni_models.NetworkInterface.__init__

    @functools.wraps(original_init)
    def init(self: Any, ec2_backend: Any, subnet: Any, *args: Any, **kwargs: Any) -> None:
        resolved = ec2_backend.get_subnet(subnet) if isinstance(subnet, str) else subnet
        taken = addresses_in_use(resolved) if resolved is not None else None
        token = _subnet_addresses.set(taken)
        try:
            original_init(self, ec2_backend, subnet, *args, **kwargs)
        finally:
            _subnet_addresses.reset(token)
        if taken is not None:  # asked-for addresses too; an instance's own stays registered to the instance
            for item in self.private_ip_addresses:
                if isinstance(item, dict) and item.get("PrivateIpAddress"):
                    taken.setdefault(item["PrivateIpAddress"], None)

    eni_models.NetworkInterface.__init__ = init


def _patch_instance_placement() -> None:
    from moto.ec2.responses.instances import InstanceResponse

    original_run = InstanceResponse.run_instances

    @functools.wraps(original_run)
    def run_instances(self: Any) -> Any:
        group = self._get_param("Placement.GroupName")
        if group and group not in _placement_groups(self.ec2_backend):
            from moto.ec2.exceptions import EC2ClientError

            raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{group}' is unknown.")
        result = original_run(self)
        if group:
            for instance in result.result.instances:
                instance.placement.group_name = group
        return result

    InstanceResponse.run_instances = run_instances


def _add_s3express_prefix_list() -> None:
    """The AWS-managed prefix list of S3 Express One Zone, which moto lacks: a gateway endpoint for
    ``com.amazonaws.REGION.s3express`` then routes to it, as in AWS. Its entry is a stand-in (part of the
    RFC 2544 benchmarking range), not one of S3 Express's real CIDRs."""
    from moto.ec2.models.managed_prefixes import ManagedPrefixListBackend

    original = ManagedPrefixListBackend.create_default_pls

    @functools.wraps(original)
    def create_default_pls(self: Any) -> None:
        original(self)
        self._create_aws_managed_prefix_list(
            name=f"com.amazonaws.{self.region_name}.s3express",
            address_family="IPv4",
            entries=[{"Cidr": "198.18.64.0/20", "Description": "moto stand-in"}],
        )

    ManagedPrefixListBackend.create_default_pls = create_default_pls


def _placement_groups(backend: Any) -> dict[str, dict[str, Any]]:
    groups = getattr(backend, "_fmdoctor_placement_groups", None)
    if groups is None:
        groups = {}
        backend._fmdoctor_placement_groups = groups
    return groups


def _add_placement_group_api() -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response
    from moto.ec2.utils import random_id

    def create_placement_group(self: Any) -> Any:
        name = self._get_param("GroupName")
        strategy = self._get_param("Strategy", "cluster")
        self.error_on_dryrun()
        groups = _placement_groups(self.ec2_backend)
        if name in groups:
            raise EC2ClientError("InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists.")
        group = {
            "GroupName": name,
            "GroupId": f"pg-{random_id(size=17)}",
            "Strategy": strategy,
            "State": "available",
        }
        if strategy == "partition":
            group["PartitionCount"] = int(self._get_param("PartitionCount", 2))
        groups[name] = group
        return ActionResult({"PlacementGroup": group})

    def describe_placement_groups(self: Any) -> Any:
        names = self._get_param("GroupNames", [])
        groups = _placement_groups(self.ec2_backend)
        unknown = [n for n in names if n not in groups]
        if unknown:
            raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{unknown[0]}' is unknown.")
        selected = [groups[n] for n in names] if names else list(groups.values())
        return ActionResult({"PlacementGroups": selected})

    EC2Response.create_placement_group = create_placement_group
    EC2Response.describe_placement_groups = describe_placement_groups


def _patch_fsx_interfaces() -> None:
    from moto.ec2.models import ec2_backends
    from moto.fsx.models import FileSystem, FSxBackend

    original_create = FSxBackend.create_file_system

    @functools.wraps(original_create)
    def create_file_system(self: Any, *args: Any, **kwargs: Any) -> Any:
        file_system = original_create(self, *args, **kwargs)
        ec2 = ec2_backends[self.account_id][self.region_name]
        file_system._fmdoctor_enis = []
        file_system._fmdoctor_vpc = None
        for subnet_id in (file_system.subnet_ids or [])[:1]:
            eni = ec2.create_network_interface(
                ec2.get_subnet(subnet_id),
                None,
                group_ids=list(file_system.security_group_ids or []),
                description=f"ENI for Amazon FSx file system {file_system.file_system_id}",
            )
            eni.requester_managed = True
            file_system._fmdoctor_enis.append(eni.id)
            file_system._fmdoctor_vpc = ec2.get_subnet(subnet_id).vpc_id
        return file_system

    FSxBackend.create_file_system = create_file_system

    original_to_dict = FileSystem.to_dict

    @functools.wraps(original_to_dict)
    def to_dict(self: Any) -> dict[str, Any]:
        data = original_to_dict(self)
        data["Lifecycle"] = "AVAILABLE"
        if getattr(self, "_fmdoctor_enis", None):
            data["NetworkInterfaceIds"] = list(self._fmdoctor_enis)
            data["VpcId"] = self._fmdoctor_vpc
        return data

    FileSystem.to_dict = to_dict


def _patch_dry_run() -> None:
    """Answer DryRun=True with DryRunOperation, as EC2 does, where moto would make the change instead."""
    from moto.ec2.responses.network_acls import NetworkACLs

    for name in ("create_network_acl_entry", "replace_network_acl_entry"):
        original = getattr(NetworkACLs, name)

        def honour_dry_run(self: Any, _original: Any = original) -> Any:
            self.error_on_dryrun()
            return _original(self)

        setattr(NetworkACLs, name, functools.wraps(original)(honour_dry_run))


def _patch_rule_duplicates() -> None:
    """AWS's duplicate test for rules: protocol, ports and peer; the description does not count."""
    from moto.ec2.models.security_groups import SecurityGroupRule

    def peer(rule: Any) -> tuple[Any, ...]:
        group = {k: v for k, v in (rule.source_group or {}).items() if k != "Description"}
        return (rule.ip_range.get("CidrIp"), rule.ip_range.get("CidrIpv6"), sorted(group.items()),
                rule.prefix_list_id)

    def same_rule(self: Any, other: Any) -> bool:
        if not isinstance(other, SecurityGroupRule):
            return NotImplemented
        ports = (self.from_port, self.to_port) == (other.from_port, other.to_port) or self.ip_protocol == "-1"
        return self.ip_protocol == other.ip_protocol and ports and peer(self) == peer(other)

    SecurityGroupRule.__eq__ = same_rule


def _add_network_acl_id_filter() -> None:
    """DescribeNetworkAcls' 'network-acl-id' filter, which (unlike NetworkAclIds) ignores unknown ids."""
    from moto.ec2.models.network_acls import NetworkAcl

    original = NetworkAcl.get_filter_value

    @functools.wraps(original)
    def get_filter_value(self: Any, filter_name: str, method_name: str | None = None) -> Any:
        if filter_name == "network-acl-id":
            return self.id
        return original(self, filter_name, method_name)

    NetworkAcl.get_filter_value = get_filter_value


def _patch_cloudwatch_percentiles() -> None:
    """GetMetricData ``Stat: pNN`` over raw values (PutMetricData Value or Values+Counts), nearest rank.

    Like CloudWatch, no percentile comes from statistic sets (StatisticValues): such periods return no
    datapoint. moto would otherwise fail to serialise the None it computes for any percentile.
    """
    import math
    import re

    from moto.cloudwatch.models import CloudWatchBackend, Statistics

    percentile = re.compile(r"p(\d{1,2}(?:\.\d+)?|100)")
    original_stat = Statistics.get_statistics_for_type

    @functools.wraps(original_stat)
    def get_statistics_for_type(self: Any, stat: str) -> Any:
        match = percentile.fullmatch(stat)
        if match is None:
            return original_stat(self, stat)
        values = sorted(self.metric_single_values_list)
        if not values or self.metric_aggregated_list:
            return None
        rank = max(1, math.ceil(float(match.group(1)) / 100 * len(values)))
        return values[rank - 1]

    Statistics.get_statistics_for_type = get_statistics_for_type

    original_data = CloudWatchBackend.get_metric_data

    @functools.wraps(original_data)
    def get_metric_data(self: Any, *args: Any, **kwargs: Any) -> Any:
        results = original_data(self, *args, **kwargs)
        for result in results:
            kept = [(t, v) for t, v in zip(result["timestamps"], result["values"], strict=True) if v is not None]
            result["timestamps"] = [t for t, _ in kept]
            result["values"] = [v for _, v in kept]
        return results

    CloudWatchBackend.get_metric_data = get_metric_data


def _patch_endpoint_interfaces() -> None:
    """Interface endpoints' ENIs: an address in their subnet and the endpoint's groups, as in AWS."""
    from moto.ec2.models.vpcs import VPCBackend
    from moto.ec2.utils import random_private_ip

    original_create = VPCBackend.create_vpc_endpoint

    @functools.wraps(original_create)
    def create_vpc_endpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        endpoint = original_create(self, *args, **kwargs)
        groups = [g for g in (self.get_security_group_from_id(i) for i in endpoint.security_group_ids or []) if g]
        for eni_id in endpoint.network_interface_ids or []:
            eni = self.get_network_interface(eni_id)
            taken = addresses_in_use(eni.subnet)
            eni.private_ip_address = free_address(eni.subnet.cidr_block, taken, random_private_ip)
            taken.setdefault(eni.private_ip_address, None)
            eni.private_ip_addresses = [{"Primary": True, "PrivateIpAddress": eni.private_ip_address}]
            eni.description = f"VPC Endpoint Interface {endpoint.id}"
            eni.requester_managed = True
            if groups:
                eni._group_set = list(groups)
        return endpoint

    VPCBackend.create_vpc_endpoint = create_vpc_endpoint
