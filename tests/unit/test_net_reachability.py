"""why_not over hand-built VPCs in moto: every explanation code blocked and allowed, table-driven.

The base VPC: public-a routes to an internet gateway and holds a NAT gateway; private-a routes the
internet through the NAT; private-b has only the main table (local route). Nodes: web (public-a, public
IP, SSH from 203.0.113.0/24), bare (public-a, no public IP), app (private-a), db (private-b).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.builders import ClusterBuilder, acl_entry
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import Aws, AwsOptions
from fmdoctor.engine.errors import TargetNotFound, UsageError
from fmdoctor.net import model as m
from fmdoctor.net.reachability import why_not

REGION = "us-west-2"
CLUSTER = "test-cluster"
OFFICE = "203.0.113.0/24"


def tcp(port: int, **peer: str) -> list[dict[str, Any]]:
    key, value = next(iter(peer.items()))
    ranges = {"cidr": ("IpRanges", {"CidrIp": value}), "group": ("UserIdGroupPairs", {"GroupId": value}),
              "prefix_list": ("PrefixListIds", {"PrefixListId": value})}[key]
    return [{"IpProtocol": "tcp", "FromPort": port, "ToPort": port, ranges[0]: [ranges[1]]}]


@pytest.fixture
def net(builder: ClusterBuilder) -> ClusterBuilder:
    b = builder
    b.internet_gateway(["public-a"])
    nat = b.nat_gateway("public-a")
    b.route_table("private", ["private-a"], [{"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": nat}])
    b.security_group("web", ingress=tcp(22, cidr=OFFICE))
    b.security_group("app")
    b.security_group("db")
    b.launch(["web"], "m5.large", "public-a", ["web"], public_ip=True)
    b.launch(["bare"], "m5.large", "public-a", ["web"])
    b.launch(["app"], "m5.large", "private-a", ["app"])
    b.launch(["db"], "m5.large", "private-b", ["db"])
    return b


def ask(source: str, destination: str, port: Any = None, protocol: str = "tcp") -> m.ReachabilityResult:
    doctor = Doctor(settings=Settings.model_validate({"clusters": {CLUSTER: {}}}), connection=Connection(region=REGION))
    return why_not(doctor, CLUSTER, source, destination, port, protocol)


def db_admits_app(b: ClusterBuilder) -> None:
    b.ec2.authorize_security_group_ingress(GroupId=b.groups["db"], IpPermissions=tcp(5432, group=b.groups["app"]))


def no_app_egress(b: ClusterBuilder) -> None:
    b.ec2.revoke_security_group_egress(GroupId=b.groups["app"],
                                       IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])


def nacl(b: ClusterBuilder, subnet: str, *entries: tuple[int, bool, str, str, str, tuple[int, int] | None]) -> str:
    """A custom network ACL on ``subnet``: entries are (number, egress, protocol, action, cidr, ports)."""
    return b.network_acl([subnet], [acl_entry(*e) for e in entries])


ALLOW_ALL_OUT = (100, True, "-1", "allow", "0.0.0.0/0", None)
ALLOW_ALL_IN = (200, False, "-1", "allow", "0.0.0.0/0", None)


def shadowing_deny(b: ClusterBuilder) -> None:
    db_admits_app(b)
    nacl(b, "private-b", (100, False, "6", "deny", "0.0.0.0/0", (5432, 5432)), ALLOW_ALL_IN, ALLOW_ALL_OUT)


def allow_before_deny(b: ClusterBuilder) -> None:
    db_admits_app(b)
    nacl(b, "private-b", (90, False, "6", "allow", "10.0.0.0/20", (5432, 5432)),
         (100, False, "6", "deny", "0.0.0.0/0", (5432, 5432)), ALLOW_ALL_IN, ALLOW_ALL_OUT)


def replies_on_low_ports_only(b: ClusterBuilder, ephemeral: bool = False) -> None:
    db_admits_app(b)
    out = [(100, True, "6", "allow", "0.0.0.0/0", (0, 1023))]
    if ephemeral:
        out.append((110, True, "6", "allow", "10.0.0.0/16", (1024, 65535)))
    nacl(b, "private-b", ALLOW_ALL_IN, *out)


def delete_nat(b: ClusterBuilder) -> None:
    b.ec2.delete_nat_gateway(NatGatewayId=b.gateways["nat"])


def app_admits_office(b: ClusterBuilder) -> None:
    b.ec2.authorize_security_group_ingress(GroupId=b.groups["app"], IpPermissions=tcp(22, cidr=OFFICE))


def db_admits_office(b: ClusterBuilder) -> None:
    b.ec2.authorize_security_group_ingress(GroupId=b.groups["db"], IpPermissions=tcp(22, cidr=OFFICE))


def specific_route_to_igw(b: ClusterBuilder) -> None:
    b.ec2.create_route(RouteTableId=b.route_tables["private"], DestinationCidrBlock="198.51.100.0/24",
                       GatewayId=b.gateways["igw"])


def office_prefix_list(b: ClusterBuilder) -> None:
    pl = b.ec2.create_managed_prefix_list(PrefixListName="office", MaxEntries=5, AddressFamily="IPv4",
                                          Entries=[{"Cidr": OFFICE}])["PrefixList"]["PrefixListId"]
    b.ec2.authorize_security_group_ingress(GroupId=b.groups["web"], IpPermissions=tcp(2222, prefix_list=pl))


def detach_igw(b: ClusterBuilder) -> None:
    b.ec2.detach_internet_gateway(InternetGatewayId=b.gateways["igw"], VpcId=b.vpc_id)


def efa_nodes(b: ClusterBuilder) -> None:
    """Two EFA nodes in private-a and one in private-b, in a group that references itself both ways."""
    b.security_group("efa", self_ingress=True, self_egress=True)
    b.launch(["gpu-a1", "gpu-a2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=2)
    b.launch(["gpu-b"], "p4d.24xlarge", "private-b", ["efa"], efa_interfaces=2)


def s3_gateway(b: ClusterBuilder) -> None:
    b.s3_gateway_endpoint(["private"], REGION)


def s3_egress(cidr: str | None) -> Callable[[ClusterBuilder], None]:
    def setup(b: ClusterBuilder) -> None:
        s3_gateway(b)
        no_app_egress(b)
        if cidr:
            peer = {"cidr": cidr}
        else:
            lists = b.ec2.describe_managed_prefix_lists()["PrefixLists"]
            peer = {"prefix_list": next(p["PrefixListId"] for p in lists if p["PrefixListName"].endswith(".s3"))}
        b.ec2.authorize_security_group_egress(GroupId=b.groups["app"], IpPermissions=tcp(443, **peer))
    return setup


def s3_interface_endpoint(admit: bool) -> Callable[[ClusterBuilder], None]:
    def setup(b: ClusterBuilder) -> None:
        group = b.security_group("vpce", ingress=tcp(443, group=b.groups["db"]) if admit else ())
        b.ec2.create_vpc_endpoint(VpcId=b.vpc_id, ServiceName=f"com.amazonaws.{REGION}.s3", VpcEndpointType="Interface",
                                  SubnetIds=[b.subnets["private-b"]], SecurityGroupIds=[group], PrivateDnsEnabled=True)
    return setup


def bucket_elsewhere(b: ClusterBuilder) -> None:
    s3_gateway(b)
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="ckpt-east")


@dataclass(frozen=True)
class Case:
    id: str
    setup: Callable[[ClusterBuilder], None] | None
    source: str
    destination: str
    port: Any
    expect: str | bool | None  # an explanation code, or the verdict
    hop: str | None = None  # a component the path must pass (allowed cases)
    protocol: str = "tcp"


CASES = [
    Case("sg-ingress-blocked", None, "app", "db", 5432, m.SG_INGRESS),
    Case("sg-ingress-referenced-group", db_admits_app, "app", "db", 5432, True, "sg-ingress"),
    Case("sg-egress-blocked", lambda b: (db_admits_app(b), no_app_egress(b)), "app", "db", 5432, m.SG_EGRESS),
    Case("nacl-deny-shadows-later-allow", shadowing_deny, "app", "db", 5432, m.NACL_DENY),
    Case("nacl-allow-before-deny", allow_before_deny, "app", "db", 5432, True, "nacl-in"),
    Case("nacl-deny-on-stateless-reply", replies_on_low_ports_only, "app", "db", 5432, m.NACL_DENY),
    Case("nacl-reply-on-ephemeral-ports", lambda b: replies_on_low_ports_only(b, True), "app", "db", 5432, True,
         "sg-state"),
    Case("no-route", None, "db", "internet", 443, m.NO_ROUTE),
    Case("via-nat-gateway", None, "app", "internet", 443, True, "nat-gateway"),
    Case("blackhole-route", delete_nat, "app", "internet", 443, m.BLACKHOLE),
    Case("no-internet-gateway-detached", detach_igw, "web", "internet", 443, m.NO_INTERNET_GATEWAY),
    Case("internet-gateway-attached", None, "web", "198.51.100.7", 443, True, "internet-gateway"),
    Case("efa-cross-subnet", efa_nodes, "gpu-a1", "gpu-b", None, m.EFA_CROSS_SUBNET, protocol="efa"),
    Case("efa-within-one-subnet", efa_nodes, "gpu-a1", "gpu-a2", None, True, "sg-ingress", protocol="efa"),
    Case("no-public-ip-outbound", None, "bare", "internet", 443, m.NO_PUBLIC_IP),
    Case("public-ip-outbound", None, "web", "internet", 443, True, "internet-gateway"),
    Case("no-public-ip-inbound", None, OFFICE, "bare", 22, m.NO_PUBLIC_IP),
    Case("public-ip-inbound", None, OFFICE, "web", 22, True, "internet-gateway"),
    Case("nat-no-inbound", app_admits_office, OFFICE, "app", 22, m.NAT_NO_INBOUND),
    Case("no-route-for-the-reply", db_admits_office, OFFICE, "db", 22, m.NO_ROUTE),
    Case("longest-prefix-takes-the-igw", specific_route_to_igw, "app", "198.51.100.7", 443, m.NO_PUBLIC_IP),
    Case("longest-prefix-rest-via-nat", specific_route_to_igw, "app", "192.0.2.7", 443, True, "nat-gateway"),
    Case("prefix-list-rule-blocked", office_prefix_list, "198.51.100.0/24", "web", 2222, m.SG_INGRESS),
    Case("prefix-list-rule-allowed", office_prefix_list, OFFICE, "web", 2222, True, "sg-ingress"),
    Case("partial-cidr-blocked", None, "203.0.112.0/23", "web", 22, m.SG_INGRESS),
    Case("s3-gateway-endpoint", s3_gateway, "app", "s3", None, True, "vpc-endpoint"),
    Case("s3-via-nat", None, "app", "s3", None, True, "nat-gateway"),
    Case("s3-no-route", None, "db", "s3", None, m.NO_ROUTE),
    Case("s3-egress-to-prefix-list", s3_egress(None), "app", "s3", None, True, "vpc-endpoint"),
    Case("s3-egress-cidr-too-narrow", s3_egress("10.0.0.0/16"), "app", "s3", None, m.SG_EGRESS),
    Case("s3-interface-endpoint-blocked", s3_interface_endpoint(False), "db", "s3", None, m.SG_INGRESS),
    Case("s3-interface-endpoint", s3_interface_endpoint(True), "db", "s3", None, True, "vpc-endpoint"),
    Case("s3-bucket-in-other-region-via-nat", bucket_elsewhere, "app", "s3://ckpt-east", None, True, "nat-gateway"),
    Case("s3-bucket-in-other-region-no-route", bucket_elsewhere, "db", "s3://ckpt-east", None, m.NO_ROUTE),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_why_not(net, case):
    if case.setup:
        case.setup(net)
    result = ask(case.source, case.destination, case.port, case.protocol)
    data = result.to_json_dict()
    assert set(data) == {"reachable", "source", "destination", "protocol", "port", "hops", "blocked_by", "warnings"}
    if isinstance(case.expect, str):
        assert result.reachable is False, [h.detail for h in result.hops]
        assert data["blocked_by"]["code"] == case.expect
        assert set(data["blocked_by"]) == {"code", "component", "resource", "rule", "fix", "evidence"}
        assert data["hops"][-1]["verdict"] == "block"
        assert result.blocked_by.evidence["summary"] and result.blocked_by.evidence["remedy"]
    else:
        assert result.reachable is case.expect, result.blocked_by and result.blocked_by.summary
        assert data["blocked_by"] is None and data["warnings"] == []
        assert case.hop in {h["component"] for h in data["hops"]}
        assert all(h["verdict"] == "pass" for h in data["hops"])


def test_blocked_details_name_the_rule_and_the_fix(net):
    shadowing_deny(net)
    blocked = ask("app", "db", 5432).blocked_by
    assert blocked.rule == "rule 100 inbound deny tcp/5432 0.0.0.0/0"
    [fix] = blocked.fix
    assert fix["action"] == "create-network-acl-entry" and fix["rule_number"] == 99 and fix["egress"] is False
    assert (fix["from_port"], fix["to_port"], fix["cidr"]) == (5432, 5432, "10.0.0.0/20")  # the source subnet


def test_sg_fix_references_the_peer_group(net):
    blocked = ask("app", "db", 5432).blocked_by
    assert blocked.resource == net.groups["db"]
    assert blocked.fix == [{"action": "authorize-security-group-ingress", "group_id": net.groups["db"],
                            "ip_protocol": "tcp", "from_port": 5432, "to_port": 5432,
                            "peer_group_id": net.groups["app"]}]


def test_partial_cidr_names_the_missing_addresses(net):
    blocked = ask("203.0.112.0/23", "web", 22).blocked_by
    assert blocked.evidence["missing_addresses"] == ["203.0.112.0/24"]
    assert [f["cidr"] for f in blocked.fix] == ["203.0.112.0/24"]


def test_blackhole_names_the_dead_target(net):
    delete_nat(net)
    blocked = ask("app", "internet", 443).blocked_by
    assert blocked.resource == net.route_tables["private"]
    assert blocked.evidence["reason"] == f"NAT gateway {net.gateways['nat']} is deleted"


def test_fsx_lustre_needs_988_and_1018_1023(net, aws):
    fsx_sg = net.security_group("fsx", ingress=tcp(988, group=net.groups["app"]))
    fs = aws.client("fsx").create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200,
                                              SubnetIds=[net.subnets["private-a"]], SecurityGroupIds=[fsx_sg])
    fs_id = fs["FileSystem"]["FileSystemId"]
    result = ask("app", fs_id)  # no --port: Lustre's ports
    assert result.flow.port_label == "988,1018-1023"
    assert result.blocked_by.code == m.SG_INGRESS and result.blocked_by.evidence["missing"] == "tcp/1018-1023"
    assert result.blocked_by.fix[0] == {"action": "authorize-security-group-ingress", "group_id": fsx_sg,
                                        "ip_protocol": "tcp", "from_port": 1018, "to_port": 1023,
                                        "peer_group_id": net.groups["app"]}
    net.ec2.authorize_security_group_ingress(
        GroupId=fsx_sg, IpPermissions=[{"IpProtocol": "tcp", "FromPort": 1018, "ToPort": 1023,
                                        "UserIdGroupPairs": [{"GroupId": net.groups["app"]}]}])
    assert ask("app", f"fsx://{fs_id}").reachable is True


def test_peering_needs_routes_on_both_sides(net):
    other = ClusterBuilder(net.ec2, "other")
    other.vpc("172.31.0.0/16")
    other.subnet("a", "172.31.0.0/20", f"{REGION}a")
    other.security_group("peer", ingress=tcp(5432, cidr="10.0.0.0/16"))
    [peer_id] = other.launch(["peer"], "m5.large", "a", ["peer"])
    peer_ip = net.ec2.describe_instances(InstanceIds=[peer_id])["Reservations"][0]["Instances"][0]["PrivateIpAddress"]
    pcx = net.ec2.create_vpc_peering_connection(VpcId=net.vpc_id, PeerVpcId=other.vpc_id)
    pcx_id = pcx["VpcPeeringConnection"]["VpcPeeringConnectionId"]
    net.ec2.accept_vpc_peering_connection(VpcPeeringConnectionId=pcx_id)
    net.ec2.create_route(RouteTableId=net.route_tables["private"], DestinationCidrBlock="172.31.0.0/16",
                         VpcPeeringConnectionId=pcx_id)
    result = ask("app", peer_ip, 5432)
    assert result.blocked_by.code == m.NO_ROUTE and result.blocked_by.evidence["direction"] == "return"
    main = net.ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [other.vpc_id]},
                                                  {"Name": "association.main", "Values": ["true"]}])
    net.ec2.create_route(RouteTableId=main["RouteTables"][0]["RouteTableId"], DestinationCidrBlock="10.0.0.0/16",
                         VpcPeeringConnectionId=pcx_id)
    result = ask("app", peer_ip, 5432)
    assert result.reachable is True
    assert any(h.component == "route" and pcx_id in (h.rule or "") for h in result.hops)


def test_transit_gateway_paths_are_not_verified(net):
    tgw = net.ec2.create_transit_gateway()["TransitGateway"]["TransitGatewayId"]
    net.ec2.create_route(RouteTableId=net.route_tables["private"], DestinationCidrBlock="172.30.0.0/16",
                         TransitGatewayId=tgw)
    result = ask("app", "172.30.1.1", 443)
    assert result.reachable is None and result.blocked_by is None
    assert [h.resource for h in result.unverified] == [net.route_tables["private"]]


@pytest.mark.parametrize("kwargs, error", [
    ({"protocol": "sctp", "port": 1}, UsageError),
    ({"port": "22-"}, UsageError),
    ({"port": "70000"}, UsageError),
    ({"protocol": "icmp", "port": 22}, UsageError),
    ({"destination": "db", "port": None}, UsageError),  # tcp to an instance needs a port
    ({"destination": "nope-not-a-node"}, TargetNotFound),
    ({"destination": "i-0123456789abcdef0"}, TargetNotFound),
    ({"destination": "10.0.99.99"}, TargetNotFound),  # inside the VPC, no interface has it
    ({"source": "10.0.0.0/8"}, UsageError),  # overlaps the VPC: name a host instead
    ({"destination": "fs-0123456789abcdef0"}, TargetNotFound),
])
def test_bad_input_raises_fmdoctor_errors(net, kwargs, error):
    args = {"source": "app", "destination": "db", "port": 5432, "protocol": "tcp", **kwargs}
    with pytest.raises(error):
        ask(args["source"], args["destination"], args["port"], args["protocol"])


def test_endpoints_by_id_ip_and_name_resolve_to_the_same_interface(net):
    instance = net.nodes["db"]
    raw = net.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    eni, ip = raw["NetworkInterfaces"][0]["NetworkInterfaceId"], raw["PrivateIpAddress"]
    db_admits_app(net)
    answers = {ask("app", target, 5432).destination.resource for target in ("db", instance, eni, ip)}
    assert answers == {eni}


def test_every_explanation_code_has_a_blocked_case():
    # nacl-reply-ports never blocks (it is a warning on a reachable path): test_net_replies covers it.
    assert set(m.CODES) - {m.NACL_REPLY_PORTS} <= {c.expect for c in CASES}


def test_efa_flows_use_the_efa_interfaces_and_take_no_port(net):
    efa_nodes(net)
    result = ask("gpu-a1", "gpu-a2", protocol="efa")
    data = result.to_json_dict()
    assert data["protocol"] == "efa" and data["port"] is None
    # one subnet: no ACL, no route table; EFA is not routed anyway
    assert [h.component for h in result.hops] == ["eni", "efa-zone", "sg-egress", "sg-ingress", "destination"]
    assert result.hops[2].rule.endswith(f"egress all traffic to {net.groups['efa']}")  # the group rule, not 0/0
    assert net.ec2.describe_network_interfaces(NetworkInterfaceIds=[result.source.resource])[
        "NetworkInterfaces"][0]["InterfaceType"] == "efa"
    with pytest.raises(UsageError, match="does not apply to protocol efa"):
        ask("gpu-a1", "gpu-a2", 22, "efa")
    with pytest.raises(UsageError, match="has no EFA interface"):
        ask("gpu-a1", "app", protocol="efa")
    with pytest.raises(UsageError, match="between EFA interfaces"):
        ask("gpu-a1", "internet", protocol="efa")


def test_efa_rules_still_apply_within_one_subnet(net):
    net.security_group("efa", self_ingress=True)  # no all-traffic outbound rule referencing the group
    net.launch(["gpu-a1", "gpu-a2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=1)
    net.ec2.revoke_security_group_egress(GroupId=net.groups["efa"], IpPermissions=[
        {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}])
    blocked = ask("gpu-a1", "gpu-a2", protocol="efa").blocked_by
    assert blocked.code == m.SG_EGRESS
    assert blocked.fix == [{"action": "authorize-security-group-egress", "group_id": net.groups["efa"],
                            "ip_protocol": "-1", "peer_group_id": net.groups["efa"]}]


# -- fix hints for routes: targets the VPC already has ---------------------------------------------------

def test_missing_route_out_names_a_live_nat_gateway(net):
    main = net.main_route_table()
    blocked = ask("db", "internet", 443).blocked_by
    assert blocked.code == m.NO_ROUTE
    assert blocked.fix == [{"action": "create-route", "route_table_id": main, "destination": "0.0.0.0/0",
                            "nat_gateway_id": net.gateways["nat"]}]
    # Towards one CIDR, the route names that CIDR.
    assert ask("db", "198.51.100.0/24", 443).blocked_by.fix[0]["destination"] == "198.51.100.0/24"


def test_missing_route_for_s3_adds_the_table_to_the_existing_gateway_endpoint(net):
    endpoint = net.s3_gateway_endpoint(["private"], REGION)
    blocked = ask("db", "s3").blocked_by
    assert blocked.code == m.NO_ROUTE
    assert blocked.fix == [{"action": "modify-vpc-endpoint", "vpc_endpoint_id": endpoint,
                            "add_route_table_ids": [net.main_route_table()]}]
    assert f"to S3 gateway endpoint {endpoint}" in blocked.evidence["remedy"]


def test_no_route_fix_when_nothing_in_the_vpc_would_help(net):
    db_admits_office(net)
    blocked = ask(OFFICE, "db", 22).blocked_by  # the reply: db has no public IP, a NAT admits nothing inbound
    assert blocked.code == m.NO_ROUTE and blocked.fix == []
    assert blocked.evidence["remedy"]


def test_blackhole_nat_route_is_pointed_at_a_live_nat_gateway(net):
    delete_nat(net)
    blocked = ask("app", "internet", 443).blocked_by
    assert blocked.code == m.BLACKHOLE and blocked.fix == []  # no other NAT gateway to name
    other = net.nat_gateway("public-a")
    blocked = ask("app", "internet", 443).blocked_by
    assert blocked.fix == [{"action": "replace-route", "route_table_id": net.route_tables["private"],
                            "destination": "0.0.0.0/0", "nat_gateway_id": other}]


def test_detached_internet_gateway_route_is_pointed_at_the_attached_one(net):
    old = net.gateways["igw"]
    detach_igw(net)
    blocked = ask("web", "internet", 443).blocked_by
    assert blocked.code == m.NO_INTERNET_GATEWAY and blocked.resource == net.route_tables["public"]
    assert blocked.evidence["internet_gateway"] == old and blocked.fix == []
    assert f"attach {old} to {net.vpc_id}" in blocked.evidence["remedy"]
    new = net.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    net.ec2.attach_internet_gateway(InternetGatewayId=new, VpcId=net.vpc_id)
    blocked = ask("web", "internet", 443).blocked_by
    assert blocked.fix == [{"action": "replace-route", "route_table_id": net.route_tables["public"],
                            "destination": "0.0.0.0/0", "gateway_id": new}]


def test_why_not_reads_only_the_network(net):
    """why-not needs the instances, their groups and the VPC's forwarding plane: never SageMaker endpoints, the
    tagging API or HyperPod (issue 39: each front end asks only for what it needs)."""
    made: list[Aws] = []

    def factory(options: AwsOptions) -> Aws:
        made.append(new_aws(options))
        return made[-1]

    doctor = Doctor(settings=Settings.model_validate({"clusters": {CLUSTER: {}}}), connection=Connection(region=REGION),
                    aws_factory=factory)
    assert why_not(doctor, CLUSTER, "app", "db", 5432).reachable is False
    services = {op.split(".")[0] for aws in made for op in aws.calls.snapshot()}
    assert services == {"ec2"}
