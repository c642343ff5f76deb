"""Scenario builders: plain boto3 calls that lay out a cluster's network and nodes.

Shared by the demo, the tests and the benchmarks so no two of them set up a VPC by hand. The calls are
the ones a person would make against real AWS (moto is taught the missing bits in ``moto_compat``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fmdoctor.demo import moto_ec2

DEMO_AMI = "ami-12c6146b"  # an image moto knows


def acl_entry(number: int, egress: bool, protocol: str, action: str, cidr: str,
              ports: tuple[int, int] | None = None) -> dict[str, Any]:
    """CreateNetworkAclEntry arguments: ``acl_entry(100, False, "6", "deny", "0.0.0.0/0", (22, 22))``."""
    entry: dict[str, Any] = {"RuleNumber": number, "Egress": egress, "Protocol": protocol, "RuleAction": action,
                             "CidrBlock": cidr}
    if ports:
        entry["PortRange"] = {"From": ports[0], "To": ports[1]}
    return entry


@dataclass(frozen=True)
class LaunchedNode:
    name: str
    id: str
    private_ip: str
    enis: tuple[str, ...] = ()  # by network card
    efa: tuple[bool, ...] = ()  # per interface in ``enis``: is it an EFA interface

    def efa_enis(self) -> list[str]:
        return [eni for eni, is_efa in zip(self.enis, self.efa, strict=True) if is_efa]


def launched_node(name: str, instance: dict[str, Any]) -> LaunchedNode:
    """A node's private IP and interfaces, by network card, from an instance as RunInstances or
    DescribeInstances returns it."""
    enis = sorted(instance["NetworkInterfaces"], key=lambda e: e["Attachment"].get("NetworkCardIndex", 0))
    return LaunchedNode(name, instance["InstanceId"], instance["PrivateIpAddress"],
                        tuple(e["NetworkInterfaceId"] for e in enis),
                        tuple(e.get("InterfaceType") in ("efa", "efa-only") for e in enis))


@dataclass
class ClusterBuilder:
    ec2: Any
    cluster: str
    tag_key: str = "fmdoctor:cluster"
    vpc_id: str = ""
    subnets: dict[str, str] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    # Name tag -> the node as its RunInstances answer described it (the seeders need no DescribeInstances).
    launched: dict[str, LaunchedNode] = field(default_factory=dict)
    route_tables: dict[str, str] = field(default_factory=dict)  # Name tag -> route table id
    gateways: dict[str, str] = field(default_factory=dict)  # "igw", "nat", "s3" -> id
    # moto's EC2 handler when moto answers ``ec2`` in this process (moto_ec2.handler): launches go straight to
    # it, as moto's dispatch hands it a parsed RunInstances, instead of through a request of hundreds of fields.
    moto_handler: Any = None

    def vpc(self, cidr: str = "10.0.0.0/16") -> str:
        self.vpc_id = self.ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
        self.ec2.create_tags(Resources=[self.vpc_id], Tags=[{"Key": "Name", "Value": f"{self.cluster}-vpc"}])
        return self.vpc_id

    def subnet(self, name: str, cidr: str, az: str) -> str:
        subnet_id = self.ec2.create_subnet(VpcId=self.vpc_id, CidrBlock=cidr, AvailabilityZone=az)["Subnet"][
            "SubnetId"
        ]
        self.ec2.create_tags(Resources=[subnet_id], Tags=[{"Key": "Name", "Value": name}])
        self.subnets[name] = subnet_id
        return subnet_id

    def security_group(
        self,
        name: str,
        *,
        self_ingress: bool = False,
        self_egress: bool = False,
        keep_default_egress: bool = True,
        ingress: Sequence[dict[str, Any]] = (),
        egress: Sequence[dict[str, Any]] = (),
    ) -> str:
        """A group; ``self_*`` add the all-traffic self-referencing rules EFA needs."""
        description = f"{name} ({self.cluster})"
        group_id = self.ec2.create_security_group(GroupName=name, Description=description, VpcId=self.vpc_id)["GroupId"]
        self.groups[name] = group_id
        if not keep_default_egress:
            self.ec2.revoke_security_group_egress(
                GroupId=group_id, IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
            )
        self_rule = {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}
        ingress_rules = [*ingress, *([self_rule] if self_ingress else [])]
        egress_rules = [*egress, *([self_rule] if self_egress else [])]
        if ingress_rules:
            self.ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=ingress_rules)
        if egress_rules:
            self.ec2.authorize_security_group_egress(GroupId=group_id, IpPermissions=egress_rules)
        return group_id

    def route_table(self, name: str, subnets: Sequence[str], routes: Sequence[dict[str, Any]] = ()) -> str:
        """A route table associated with ``subnets`` (names or ids); ``routes`` are CreateRoute arguments."""
        table = self.ec2.create_route_table(VpcId=self.vpc_id)["RouteTable"]["RouteTableId"]
        self.ec2.create_tags(Resources=[table], Tags=[{"Key": "Name", "Value": name}])
        for route in routes:
            self.ec2.create_route(RouteTableId=table, **route)
        for subnet in subnets:
            self.ec2.associate_route_table(RouteTableId=table, SubnetId=self.subnets.get(subnet, subnet))
        self.route_tables[name] = table
        return table

    def network_acl(self, subnets: Sequence[str], entries: Sequence[dict[str, Any]]) -> str:
        """A custom network ACL replacing the current one of ``subnets``; ``entries`` are CreateNetworkAclEntry
        arguments (RuleNumber, Egress, Protocol, RuleAction, CidrBlock[, PortRange])."""
        acl = self.ec2.create_network_acl(VpcId=self.vpc_id)["NetworkAcl"]["NetworkAclId"]
        for entry in entries:
            self.ec2.create_network_acl_entry(NetworkAclId=acl, **entry)
        for subnet in subnets:
            subnet_id = self.subnets.get(subnet, subnet)
            current = self.ec2.describe_network_acls(Filters=[{"Name": "association.subnet-id", "Values": [subnet_id]}])
            association = next(a["NetworkAclAssociationId"] for a in current["NetworkAcls"][0]["Associations"]
                               if a["SubnetId"] == subnet_id)
            self.ec2.replace_network_acl_association(AssociationId=association, NetworkAclId=acl)
        return acl

    def internet_gateway(self, public_subnets: Sequence[str], table_name: str = "public") -> str:
        """An attached internet gateway and a route table sending 0.0.0.0/0 to it from ``public_subnets``."""
        igw = self.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        self.ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=self.vpc_id)
        self.route_table(table_name, public_subnets, [{"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": igw}])
        self.gateways["igw"] = igw
        return igw

    def nat_gateway(self, subnet: str) -> str:
        """A public NAT gateway (with an Elastic IP) in ``subnet``."""
        allocation = self.ec2.allocate_address(Domain="vpc")["AllocationId"]
        nat = self.ec2.create_nat_gateway(SubnetId=self.subnets.get(subnet, subnet), AllocationId=allocation)
        self.gateways["nat"] = nat["NatGateway"]["NatGatewayId"]
        return self.gateways["nat"]

    def main_route_table(self) -> str:
        """The VPC's main route table (subnets without a table of their own use it)."""
        tables = self.ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [self.vpc_id]},
                                                         {"Name": "association.main", "Values": ["true"]}])
        return str(tables["RouteTables"][0]["RouteTableId"])

    def s3_gateway_endpoint(self, route_tables: Sequence[str], region: str, service: str = "s3",
                            policy: str | None = None) -> str:
        """An S3 (or, with ``service="s3express"``, S3 Express One Zone) gateway endpoint: it adds the service's
        prefix-list route to each table. ``policy`` is a custom endpoint policy (JSON); AWS's default otherwise."""
        tables = [self.route_tables.get(t, t) for t in route_tables]
        extra = {"PolicyDocument": policy} if policy else {}
        endpoint = self.ec2.create_vpc_endpoint(VpcId=self.vpc_id, ServiceName=f"com.amazonaws.{region}.{service}",
                                                VpcEndpointType="Gateway", RouteTableIds=tables, **extra)
        self.gateways[service] = endpoint["VpcEndpoint"]["VpcEndpointId"]
        return self.gateways[service]

    def placement_group(self, name: str, strategy: str = "cluster") -> str:
        self.ec2.create_placement_group(GroupName=name, Strategy=strategy)
        return name

    def launch(
        self,
        names: Sequence[str],
        instance_type: str,
        subnet: str,
        groups: Sequence[str],
        *,
        efa_interfaces: int = 0,
        placement_group: str | None = None,
        spot: bool = False,
        capacity_block: str | None = None,
        role: str | None = None,
        public_ip: bool = False,
        extra_tags: dict[str, str] | None = None,
        efa_only: bool = False,
        first_efa_card: int = 0,
    ) -> list[str]:
        """Launch one instance per name; EFA interfaces go one per network card, as AWS recommends.

        ``efa_only``: the secondary EFA interfaces are EFA-only (no IP; the primary stays EFA with ENA).
        ``first_efa_card``: 1 for types whose card 0 carries no EFA (p6-b300): the primary is then a plain ENA
        interface. ``capacity_block``: the reservation id of a Capacity Block to launch into."""
        subnet_id = self.subnets.get(subnet, subnet)
        group_ids = [self.groups.get(g, g) for g in groups]
        if efa_interfaces:
            cards = ([0] if first_efa_card else []) + list(range(first_efa_card, first_efa_card + efa_interfaces))
            interfaces = [
                {
                    "DeviceIndex": card,  # moto keys an instance's interfaces by device index
                    "NetworkCardIndex": card,
                    "SubnetId": subnet_id,
                    "Groups": group_ids,
                    "InterfaceType": ("interface" if card < first_efa_card else
                                      "efa-only" if efa_only and card > 0 else "efa"),
                }
                for card in cards
            ]
        else:
            interfaces = [
                {"DeviceIndex": 0, "SubnetId": subnet_id, "Groups": group_ids, "AssociatePublicIpAddress": public_ip}
            ]
        ids = []
        for name in names:
            tags = {self.tag_key: self.cluster, "Name": name, **(extra_tags or {})}
            if role:
                tags["fmdoctor:role"] = role
            kwargs: dict[str, Any] = {
                "ImageId": DEMO_AMI,
                "InstanceType": instance_type,
                "MinCount": 1,
                "MaxCount": 1,
                "NetworkInterfaces": interfaces,
                "TagSpecifications": [
                    {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                ],
            }
            if placement_group:
                kwargs["Placement"] = {"GroupName": placement_group}
            if spot:
                kwargs["InstanceMarketOptions"] = {"MarketType": "spot"}
            if capacity_block:  # a Capacity Block reservation id ('cr-...'), launched into as AWS documents it
                kwargs["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
                kwargs["CapacityReservationSpecification"] = {
                    "CapacityReservationTarget": {"CapacityReservationId": capacity_block}}
            if self.moto_handler is not None:
                instance = moto_ec2.run_instances(self.moto_handler, kwargs)[0]
            else:
                instance = self.ec2.run_instances(**kwargs)["Instances"][0]
            self.launched[name] = launched_node(name, instance)
            ids.append(instance["InstanceId"])
        return ids

    @property
    def nodes(self) -> dict[str, str]:
        """Name tag -> instance id, in launch order."""
        return {name: node.id for name, node in self.launched.items()}
