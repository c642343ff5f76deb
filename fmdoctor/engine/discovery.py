"""Fetch a cluster's :class:`Inventory` with the fewest AWS calls the APIs allow, and only the parts asked for.

One paginated DescribeInstances (filtered by tag value and state, read page by page and slimmed as it
arrives: fmdoctor.engine.instance_listing) yields the instances *and* their interfaces; it is always
made, since it is what identifies a cluster. For the ``instances`` part, groups, rules, subnets and
instance types then come in batched describes, in parallel. The call count grows with pages, never with
instances. For the ``hyperpod`` part, a name no instance carries is looked up as a
SageMaker HyperPod cluster (one DescribeCluster); for ``endpoints``, the SageMaker endpoints of the target
are discovered (fmdoctor.engine.endpoints). A run asks for the parts its checks read, so a name no instance
carries is looked up as whatever else those checks can check before it is reported unknown.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from fmdoctor.engine.aws import Aws
from fmdoctor.engine.concurrency import all_at_once
from fmdoctor.engine.endpoints import fetch_endpoints, with_endpoints
from fmdoctor.engine.errors import describe_aws_failure, note_failed_call
from fmdoctor.engine.hyperpod import HYPERPOD_CLUSTER, probe_hyperpod_cluster
from fmdoctor.engine.instance_listing import read_instance_pages
from fmdoctor.engine.inventory import (
    COMPUTE,
    ENDPOINTS,
    HEAD,
    HYPERPOD,
    INFERENCE,
    INSTANCES,
    INVENTORY_PARTS,
    LOGIN,
    Instance,
    InstanceTypeInfo,
    Inventory,
    NetworkCard,
    NetworkInterface,
    SecurityGroup,
    SgRule,
    StagedInventory,
    Subnet,
    UnavailablePart,
    chunked,
)

if TYPE_CHECKING:
    from fmdoctor.engine.context import RunStart

# EC2 accepts at most 200 values in one filter; DescribeInstanceTypes at most 100 types per call.
FILTER_VALUES_MAX = 200
INSTANCE_TYPES_MAX = 100
PAGE_SIZE = 1000

# What discovery itself calls, so a policy for some checks (`fmdoctor iam-policy --only`) lets their run discover
# the target: the instance listing always (it identifies a cluster), and the describes of each part they read.
DISCOVERY_IAM_ACTIONS: dict[str | None, tuple[str, ...]] = {
    None: ("ec2:DescribeInstances",),
    INSTANCES: ("ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules", "ec2:DescribeSubnets",
                "ec2:DescribeInstanceTypes"),
    HYPERPOD: ("sagemaker:DescribeCluster",),
    ENDPOINTS: ("tag:GetResources", "sagemaker:ListEndpoints", "sagemaker:DescribeEndpoint",
                "sagemaker:DescribeEndpointConfig", "sagemaker:DescribeModel", "sagemaker:ListInferenceComponents",
                "sagemaker:DescribeInferenceComponent"),
}


def discovery_iam_actions(parts: Collection[str]) -> list[str]:
    """The IAM actions discovery of ``parts`` needs (see DISCOVERY_IAM_ACTIONS)."""
    return [a for part in (None, *sorted(parts)) for a in DISCOVERY_IAM_ACTIONS.get(part, ())]


HEAD_NODE_TAGS = {("parallelcluster:node-type", "HeadNode"), ("fmdoctor:role", "head")}
LOGIN_NODE_TAGS = {("parallelcluster:node-type", "LoginNode"), ("fmdoctor:role", "login")}
INFERENCE_NODE_TAGS = {("fmdoctor:role", "inference")}


def fetch_inventory(
    aws: Aws,
    cluster: str,
    tag_keys: Sequence[str],
    head_node_ids: Sequence[str] = (),
    hyperpod_name: str | None = None,
    *,
    endpoint_names: Sequence[str] = (),
    parts: Collection[str] = INVENTORY_PARTS,
    hostname_tags: Sequence[str] = (),
) -> Inventory:
    return stage_inventory(aws, cluster, tag_keys, head_node_ids, hyperpod_name, endpoint_names=endpoint_names,
                           parts=parts, hostname_tags=hostname_tags).whole()


def stage_inventory(
    aws: Aws,
    cluster: str,
    tag_keys: Sequence[str],
    head_node_ids: Sequence[str] = (),
    hyperpod_name: str | None = None,
    *,
    endpoint_names: Sequence[str] = (),
    parts: Collection[str] = INVENTORY_PARTS,
    hostname_tags: Sequence[str] = (),
    early: RunStart | None = None,
) -> StagedInventory:
    """The inventory in two stages: the instances with their details and the HyperPod probe, returned as soon as
    they are read, and the SageMaker endpoints, whose chain (GetResources, ListEndpoints, the describes) runs
    beside them in a thread of its own and ends later. ``early``: the run's start, whose shared memo the HyperPod
    probe reads (a prefetched DescribeCluster of the same name is not asked again)."""
    ec2 = aws.client("ec2")
    # Endpoint discovery needs nothing from the instances: its chain runs beside theirs.
    endpoints: Future[Any] | None = None
    if ENDPOINTS in parts:
        endpoints = Future()
        threading.Thread(target=_settle, args=(endpoints, lambda: fetch_endpoints(aws, cluster, tag_keys,
                                                                                  endpoint_names)),
                         name="fmdoctor-endpoints", daemon=True).start()
    instances, interfaces = _fetch_instances(ec2, cluster, tag_keys, set(head_node_ids))
    inventory = Inventory(cluster=cluster, region=aws.region, instances=tuple(instances), interfaces=interfaces,
                          hostname_tags=tuple(hostname_tags))
    if instances and INSTANCES in parts:
        inventory = _with_instance_details(ec2, inventory)
    if not instances and HYPERPOD in parts:
        name = hyperpod_name or cluster
        describe = None if early is None else (lambda n: HYPERPOD_CLUSTER.read(early, n))
        inventory = dataclasses.replace(inventory, hyperpod=probe_hyperpod_cluster(aws, name, describe))
    if endpoints is None:
        return StagedInventory(inventory)
    whole: Future[Inventory] = Future()
    first = inventory

    def joined(done: Future[Any]) -> None:
        try:
            found, gaps = done.result()
            whole.set_result(with_endpoints(first, found, gaps))
        except BaseException as exc:
            whole.set_exception(exc)

    endpoints.add_done_callback(joined)
    return StagedInventory(first, whole, frozenset({ENDPOINTS}))


def _settle(future: Future[Any], work: Callable[[], Any]) -> None:
    try:
        future.set_result(work())
    except BaseException as exc:  # named by the call that failed, for the thread that reports it
        note_failed_call(exc)
        future.set_exception(exc)


def _with_instance_details(ec2: Any, inventory: Inventory) -> Inventory:
    interfaces = inventory.interfaces.values()
    group_ids = sorted({g for eni in interfaces for g in eni.security_group_ids})
    subnet_ids = sorted({eni.subnet_id for eni in interfaces if eni.subnet_id})
    vpc_ids = sorted({i.vpc_id for i in inventory.instances if i.vpc_id} | {e.vpc_id for e in interfaces if e.vpc_id})
    type_names = sorted({i.instance_type for i in inventory.instances})

    jobs: dict[str, Callable[[], Any]] = {
        "security_groups": lambda: fetch_security_groups(ec2, group_ids),
        "subnets": lambda: _fetch_subnets(ec2, vpc_ids, subnet_ids),
        "instance_types": lambda: _fetch_instance_types(ec2, type_names),
    }
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="fmdoctor-inventory") as pool:
        futures = {name: pool.submit(_part, name, job) for name, job in jobs.items()}
        parts = {name: future.result() for name, future in futures.items()}
    whole = () if isinstance(parts["subnets"], UnavailablePart) else tuple(vpc_ids)
    return dataclasses.replace(inventory, **parts, subnets_of_vpcs=whole)


def _part(name: str, fetch: Callable[[], Any]) -> Any:
    """A fetched detail, or a stand-in that fails only the checks that read it (denied, throttled, timed out).

    Classified in the thread that made the call, which is where the failed operation's service is known.
    Bad credentials and bugs still end the run: no check could do better."""
    try:
        return fetch()
    except Exception as exc:
        failure = describe_aws_failure(exc)
        if failure is None or failure.kind == "credentials":
            raise
        return UnavailablePart(name, failure)


PROBE_PAGE = 5  # DescribeInstances' smallest MaxResults


def has_tagged_instance(ec2: Any, cluster: str, tag_keys: Sequence[str]) -> bool:
    """Whether a pending or running instance carries ``cluster`` under one of ``tag_keys``: one DescribeInstances
    of at most 5 instances per key, stopping at the first that names one. False when a call fails (the caller
    then lists the inventory, which reports the failure as every run does)."""
    for key in tag_keys:
        try:
            page = ec2.describe_instances(Filters=[{"Name": f"tag:{key}", "Values": [cluster]},
                                                   {"Name": "instance-state-name", "Values": ["pending", "running"]}],
                                          MaxResults=PROBE_PAGE)
        except Exception as exc:
            if describe_aws_failure(exc) is None:
                raise
            return False
        if any(r.get("Instances") for r in page.get("Reservations", [])):
            return True
    return False


def _fetch_instances(
    ec2: Any, cluster: str, tag_keys: Sequence[str], head_node_ids: set[str]
) -> tuple[list[Instance], dict[str, NetworkInterface]]:
    # EC2 filters cannot OR across tag keys, but 'tag-value' matches any key: one listing, then keep the
    # instances whose configured keys carry the value.
    filters = [
        {"Name": "tag-value", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    keys = set(tag_keys)
    instances: list[Instance] = []
    interfaces: dict[str, NetworkInterface] = {}
    for reservations in read_instance_pages(ec2, filters):
        for reservation in reservations:
            for raw in reservation.get("Instances", []):
                tags = {t["Key"]: t.get("Value", "") for t in raw.get("Tags", [])}
                if not any(tags.get(k) == cluster for k in keys):
                    continue
                enis = [_interface(raw["InstanceId"], n) for n in raw.get("NetworkInterfaces", [])]
                enis.sort(key=lambda e: (e.network_card_index or 0, e.device_index or 0, e.id))
                interfaces.update({e.id: e for e in enis})
                instances.append(_instance(raw, tags, enis, head_node_ids))
    instances.sort(key=lambda i: (i.role != HEAD, i.tags.get("Name", ""), i.id))
    return instances, interfaces


def _instance(raw: dict[str, Any], tags: dict[str, str], enis: list[NetworkInterface], heads: set[str]) -> Instance:
    tag_pairs = set(tags.items())
    if raw["InstanceId"] in heads or tag_pairs & HEAD_NODE_TAGS:
        role = HEAD
    elif tag_pairs & LOGIN_NODE_TAGS:
        role = LOGIN
    elif tag_pairs & INFERENCE_NODE_TAGS:
        role = INFERENCE
    else:
        role = COMPUTE
    placement = raw.get("Placement", {})
    return Instance(
        id=raw["InstanceId"],
        instance_type=raw.get("InstanceType", "unknown"),
        state=raw.get("State", {}).get("Name", "unknown"),
        subnet_id=raw.get("SubnetId"),
        vpc_id=raw.get("VpcId"),
        availability_zone=placement.get("AvailabilityZone"),
        private_ip=raw.get("PrivateIpAddress"),
        public_ip=raw.get("PublicIpAddress"),
        private_dns=raw.get("PrivateDnsName") or None,
        placement_group=placement.get("GroupName") or None,
        lifecycle=raw.get("InstanceLifecycle") or "on-demand",
        spot_request_id=raw.get("SpotInstanceRequestId"),
        capacity_block_id=raw.get("CapacityBlockId"),
        capacity_reservation_id=raw.get("CapacityReservationId"),
        platform=str(raw.get("Platform") or ""),
        launch_time=raw.get("LaunchTime"),
        role=role,
        tags=tags,
        interface_ids=tuple(e.id for e in enis),
    )


def _interface(instance_id: str, raw: dict[str, Any]) -> NetworkInterface:
    attachment = raw.get("Attachment", {})
    private_ips = [p["PrivateIpAddress"] for p in raw.get("PrivateIpAddresses", []) if p.get("PrivateIpAddress")]
    if not private_ips and raw.get("PrivateIpAddress"):
        private_ips = [raw["PrivateIpAddress"]]
    return NetworkInterface(
        id=raw["NetworkInterfaceId"],
        subnet_id=raw.get("SubnetId", ""),
        vpc_id=raw.get("VpcId"),
        security_group_ids=tuple(sorted(g["GroupId"] for g in raw.get("Groups", []))),
        private_ips=tuple(private_ips),
        public_ip=(raw.get("Association") or {}).get("PublicIp"),
        interface_type=raw.get("InterfaceType") or "interface",
        instance_id=instance_id,
        device_index=attachment.get("DeviceIndex"),
        network_card_index=attachment.get("NetworkCardIndex"),
        description=raw.get("Description", ""),
        ipv6_ips=tuple(a["Ipv6Address"] for a in raw.get("Ipv6Addresses", []) if a.get("Ipv6Address")),
    )


def fetch_security_groups(ec2: Any, group_ids: Sequence[str]) -> dict[str, SecurityGroup]:
    """Groups with their rules (rule ids come only from DescribeSecurityGroupRules), batched by filter size."""
    if not group_ids:
        return {}
    names: dict[str, tuple[str, str | None]] = {}
    rules: dict[str, list[SgRule]] = {g: [] for g in group_ids}

    def groups(batch: list[str]) -> list[dict[str, Any]]:
        return [sg for page in ec2.get_paginator("describe_security_groups").paginate(
            Filters=[{"Name": "group-id", "Values": batch}]) for sg in page.get("SecurityGroups", [])]

    def group_rules(batch: list[str]) -> list[dict[str, Any]]:
        return [raw for page in ec2.get_paginator("describe_security_group_rules").paginate(
            Filters=[{"Name": "group-id", "Values": batch}], PaginationConfig={"PageSize": PAGE_SIZE})
            for raw in page.get("SecurityGroupRules", [])]

    # The groups' names and their rules are two independent describes: both in flight at once, every batch too.
    batches = list(chunked(group_ids, FILTER_VALUES_MAX))
    jobs = [(groups, b) for b in batches] + [(group_rules, b) for b in batches]
    for (job, _), found in zip(jobs, all_at_once(lambda j: j[0](j[1]), jobs, name="fmdoctor-groups"), strict=True):
        for raw in found:
            if job is groups:
                names[raw["GroupId"]] = (raw.get("GroupName", ""), raw.get("VpcId"))
            else:
                rules.setdefault(raw["GroupId"], []).append(_rule(raw))
    return {
        gid: SecurityGroup(id=gid, name=names[gid][0], vpc_id=names[gid][1], rules=tuple(rules.get(gid, ())))
        for gid in group_ids
        if gid in names
    }


def _rule(raw: dict[str, Any]) -> SgRule:
    protocol = str(raw.get("IpProtocol", "-1"))
    return SgRule(
        id=raw.get("SecurityGroupRuleId", "?"),
        group_id=raw["GroupId"],
        egress=bool(raw.get("IsEgress")),
        protocol={"6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6"}.get(protocol, protocol),
        from_port=raw.get("FromPort"),
        to_port=raw.get("ToPort"),
        cidr_ipv4=raw.get("CidrIpv4"),
        cidr_ipv6=raw.get("CidrIpv6"),
        prefix_list_id=raw.get("PrefixListId"),
        referenced_group_id=(raw.get("ReferencedGroupInfo") or {}).get("GroupId"),
        description=raw.get("Description", ""),
    )


def _fetch_subnets(ec2: Any, vpc_ids: Sequence[str], subnet_ids: Sequence[str]) -> dict[str, Subnet]:
    """Every subnet of the instances' VPCs (the topology's reachability reads them too: one DescribeSubnets for
    both, see Inventory.subnets_for), then by id any interface's subnet outside them."""
    subnets: dict[str, Subnet] = {}
    asked = [("vpc-id", batch) for batch in chunked(vpc_ids, FILTER_VALUES_MAX)]
    for name, batch in asked:
        subnets.update(_subnet_pages(ec2, name, batch))
    rest = [s for s in subnet_ids if s not in subnets]
    for batch in chunked(rest, FILTER_VALUES_MAX):
        subnets.update(_subnet_pages(ec2, "subnet-id", batch))
    return subnets


def _subnet_pages(ec2: Any, name: str, values: list[str]) -> dict[str, Subnet]:
    subnets = {}
    for page in ec2.get_paginator("describe_subnets").paginate(Filters=[{"Name": name, "Values": values}]):
        for raw in page.get("Subnets", []):
            subnets[raw["SubnetId"]] = Subnet(
                id=raw["SubnetId"],
                vpc_id=raw["VpcId"],
                availability_zone=raw.get("AvailabilityZone", ""),
                cidr=raw.get("CidrBlock", ""),
                availability_zone_id=raw.get("AvailabilityZoneId", ""),
            )
    return subnets


def _fetch_instance_types(ec2: Any, names: Sequence[str]) -> dict[str, InstanceTypeInfo]:
    """Facts of the named types. A type this region does not know (a preview type, a typo in a launch template)
    fails a whole DescribeInstanceTypes call with InvalidInstanceType, so it is dropped and the rest asked
    again: it stays out of the result, and the checks that need it say they could not judge it."""
    infos: dict[str, InstanceTypeInfo] = {}
    for batch in chunked(names, INSTANCE_TYPES_MAX):
        pending = list(batch)
        while pending:
            try:
                for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=pending):
                    for raw in page.get("InstanceTypes", []):
                        infos[raw["InstanceType"]] = instance_type_info(raw)
                break
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "InvalidInstanceType":
                    raise
                unknown = _named_in(exc.response.get("Error", {}).get("Message", ""), pending)
                if not unknown and len(pending) > 1:  # the message did not say which: ask for each alone
                    for name in pending:
                        infos.update(_fetch_instance_types(ec2, [name]))
                    break
                pending = [n for n in pending if n not in unknown] if unknown else []
    return infos


def _named_in(message: str, names: Sequence[str]) -> set[str]:
    """The requested types an InvalidInstanceType message names ('... do not exist: [p6e-gb200.36xlarge]')."""
    listed = set(re.findall(r"[a-z0-9][a-z0-9-]*\.[a-z0-9-]+", message.split(":", 1)[-1]))
    return {n for n in names if n in listed}


def instance_type_info(raw: dict[str, Any]) -> InstanceTypeInfo:
    gpus = (raw.get("GpuInfo") or {}).get("Gpus") or []
    neuron = (raw.get("NeuronInfo") or {}).get("NeuronDevices") or []
    network = raw.get("NetworkInfo") or {}
    return InstanceTypeInfo(
        name=raw["InstanceType"],
        gpus=sum(g.get("Count", 0) for g in gpus),
        gpu_model=gpus[0].get("Name") if gpus else None,
        gpu_memory_mib=gpus[0].get("MemoryInfo", {}).get("SizeInMiB", 0) if gpus else 0,
        neuron_devices=sum(d.get("Count", 0) for d in neuron),
        neuron_cores=sum(d.get("Count", 0) * d.get("CoreInfo", {}).get("Count", 0) for d in neuron),
        efa_supported=bool(network.get("EfaSupported")),
        max_efa_interfaces=int((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)),
        max_network_cards=int(network.get("MaximumNetworkCards", 1) or 1),
        network_cards=tuple(_network_card(c) for c in network.get("NetworkCards") or []),
    )


def _network_card(raw: dict[str, Any]) -> NetworkCard:
    kinds = raw.get("InterfaceTypes")
    peak = raw.get("PeakBandwidthInGbps")
    return NetworkCard(
        index=int(raw.get("NetworkCardIndex", 0)),
        peak_gbps=float(peak) if peak is not None else None,
        efa=None if kinds is None else bool({"efa", "efa-only"} & set(kinds)),
    )
