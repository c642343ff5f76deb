"""ssh-, fsx-, s3- and efa-peer-unreachable against moto: each failing and healthy, plus what they skip."""

from __future__ import annotations

from typing import Any

import pytest

from fmdoctor.demo.builders import ClusterBuilder, acl_entry
from fmdoctor.engine.model import Severity

REGION = "us-west-2"
OFFICE = "203.0.113.0/24"
NETWORK = ["ssh-unreachable", "fsx-unreachable", "s3-unreachable"]


def tcp(ports: tuple[int, int], group: str | None = None, cidr: str | None = None) -> list[dict[str, Any]]:
    peer = {"UserIdGroupPairs": [{"GroupId": group}]} if group else {"IpRanges": [{"CidrIp": cidr}]}
    return [{"IpProtocol": "tcp", "FromPort": ports[0], "ToPort": ports[1], **peer}]


@pytest.fixture
def cluster(builder: ClusterBuilder) -> ClusterBuilder:
    """A healthy small cluster: head in public-a (public IP, SSH from the office), two GPU nodes in private-a
    (NAT for the internet, an S3 gateway endpoint), EFA group self-referencing both ways."""
    b = builder
    b.internet_gateway(["public-a"])
    nat = b.nat_gateway("public-a")
    b.route_table("private", ["private-a", "private-b"], [{"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": nat}])
    b.s3_gateway_endpoint(["private"], REGION)
    b.security_group("head", ingress=tcp((22, 22), cidr=OFFICE))
    b.security_group("efa", self_ingress=True, self_egress=True)
    b.launch(["head"], "m5.8xlarge", "public-a", ["head"], role="head", public_ip=True)
    b.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    return b


def lustre(b: ClusterBuilder, aws, ports: list[tuple[int, int]], reverse: bool = True, servers: bool = True) -> str:
    """An FSx for Lustre file system in private-a whose group admits ``ports`` from the nodes' groups and (the
    FSx guide's "from the security group itself") 988 and 1018-1023 from itself."""
    clients = [b.groups["head"], b.groups["efa"]]
    sg = b.security_group("fsx", ingress=[r for p in ports for g in clients for r in tcp(p, group=g)])
    if servers:
        b.ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=tcp((988, 988), group=sg)
                                               + tcp((1018, 1023), group=sg))
    if reverse:
        for client in clients:
            for p in ((988, 988), (1018, 1023)):
                b.ec2.authorize_security_group_ingress(GroupId=client, IpPermissions=tcp(p, group=sg))
    fs = aws.client("fsx").create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200,
                                              SubnetIds=[b.subnets["private-a"]], SecurityGroupIds=[sg])
    return fs["FileSystem"]["FileSystemId"]


def test_healthy_cluster_has_no_network_findings(cluster, aws, run_checks):
    lustre(cluster, aws, [(988, 988), (1018, 1023)])
    report = run_checks(NETWORK + ["efa-peer-unreachable"], network={"admin_cidrs": [OFFICE]})
    assert report.findings == [] and report.errors == [] and report.skipped == []
    assert report.stats.checks_run == NETWORK + ["efa-peer-unreachable"]


# -- ssh-unreachable ----------------------------------------------------------------------------------------

def test_ssh_from_an_admin_cidr_the_group_does_not_admit(cluster, run_checks):
    report = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE, "198.51.100.7"]})
    [finding] = report.findings
    head = cluster.nodes["head"]
    assert finding.resource == head and finding.severity is Severity.CRITICAL
    ev = finding.evidence
    assert ev["admin_cidrs_blocked"] == ["198.51.100.7/32"]
    assert (ev["code"], ev["blocking_resource"], ev["port"]) == ("sg-ingress-no-match", cluster.groups["head"], 22)
    assert ev["fix"] == [{"action": "authorize-security-group-ingress", "group_id": cluster.groups["head"],
                          "ip_protocol": "tcp", "from_port": 22, "to_port": 22, "cidr": "198.51.100.7/32"}]
    assert "only from 203.0.113.0/24" in finding.summary


def test_ssh_port_setting_and_a_stateless_reply_deny(cluster, run_checks):
    b = cluster
    b.ec2.authorize_security_group_ingress(GroupId=b.groups["head"], IpPermissions=tcp((2222, 2222), cidr=OFFICE))
    # Outbound only to 443: replies to the admins' ephemeral ports are dropped.
    acl = b.network_acl(["public-a"], [acl_entry(100, False, "-1", "allow", "0.0.0.0/0"),
                                       acl_entry(100, True, "6", "allow", "0.0.0.0/0", (443, 443))])
    [finding] = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE], "ssh_port": 2222}).findings
    ev = finding.evidence
    assert (ev["code"], ev["blocking_resource"], ev["direction"], ev["port"]) == ("nacl-deny", acl, "return", 2222)
    assert ev["fix"][0]["egress"] is True and (ev["fix"][0]["from_port"], ev["fix"][0]["to_port"]) == (1024, 65535)


def test_ssh_needs_admin_cidrs_and_a_head_node(builder, run_checks):
    builder.security_group("g")
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["g"])
    report = run_checks(["ssh-unreachable"])
    assert [s.reason for s in report.skipped] == ["no admin CIDRs configured (network.admin_cidrs)"]
    report = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE]})
    assert "no head or login node" in report.skipped[0].reason


def head_without_role_tag(b: ClusterBuilder, **tags: str) -> str:
    """A cluster whose head node is known only by ``tags`` or by config; SSH admits only the office."""
    b.internet_gateway(["public-a"])
    b.security_group("head", ingress=tcp((22, 22), cidr=OFFICE))
    [head] = b.launch(["head"], "m5.8xlarge", "public-a", ["head"], public_ip=True, extra_tags=tags or None)
    b.launch(["gpu-1"], "m5.large", "public-a", ["head"], public_ip=True)  # a compute node, never checked
    return head


def test_ssh_head_node_known_by_the_parallelcluster_tag(builder, run_checks):
    head = head_without_role_tag(builder, **{"parallelcluster:node-type": "HeadNode"})
    report = run_checks(["ssh-unreachable"], network={"admin_cidrs": ["198.51.100.0/24"]})
    [finding] = report.findings
    assert finding.resource == head and finding.evidence["role"] == "head"
    assert finding.evidence["code"] == "sg-ingress-no-match"
    assert run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE]}).findings == []


def test_ssh_head_node_known_by_config(builder, run_checks):
    head = head_without_role_tag(builder)
    assert "no head or login node" in run_checks(["ssh-unreachable"], network={
        "admin_cidrs": ["198.51.100.0/24"]}).skipped[0].reason
    report = run_checks(["ssh-unreachable"], head_nodes=[head], network={"admin_cidrs": ["198.51.100.0/24"]})
    [finding] = report.findings
    assert finding.resource == head and finding.evidence["role"] == "head"


def test_ssh_reply_route_fix_names_the_attached_internet_gateway(builder, run_checks):
    """The head's subnet lost its route out: the fix is a route to the VPC's internet gateway, which applies."""
    b = builder
    igw = b.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    b.ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=b.vpc_id)
    table = b.route_table("public", ["public-a"])  # no 0.0.0.0/0 route
    b.security_group("head", ingress=tcp((22, 22), cidr=OFFICE))
    b.launch(["head"], "m5.8xlarge", "public-a", ["head"], role="head", public_ip=True)
    [finding] = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE]}).findings
    assert (finding.evidence["code"], finding.evidence["direction"]) == ("no-route", "return")
    assert finding.evidence["fix"] == [{"action": "create-route", "route_table_id": table,
                                        "destination": OFFICE, "gateway_id": igw}]


def test_ssh_from_inside_the_vpc_is_reported_unverified_not_healthy(cluster, run_checks):
    report = run_checks(["ssh-unreachable"], network={"admin_cidrs": ["10.0.0.0/16"]})
    [error] = report.errors
    assert error.code == "NotEvaluated" and "10.0.0.0/16" in error.unverified
    assert report.status.value == "warning"


# -- fsx-unreachable ----------------------------------------------------------------------------------------

def test_fsx_open_on_988_only(cluster, aws, run_checks):
    fs_id = lustre(cluster, aws, [(988, 988)])
    [finding] = run_checks(["fsx-unreachable"]).findings
    ev = finding.evidence
    assert finding.resource == fs_id
    assert (ev["code"], ev["blocking_resource"]) == ("sg-ingress-no-match", cluster.groups["fsx"])
    assert ev["node_count"] == 3 and ev["directions_blocked"] == ["node -> file system"]
    assert sorted(f["peer_group_id"] for f in ev["fix"]) == sorted([cluster.groups["head"], cluster.groups["efa"]])
    assert {(f["from_port"], f["to_port"]) for f in ev["fix"]} == {(1018, 1023)}


def test_fsx_servers_must_reach_the_clients_too(cluster, aws, run_checks):
    lustre(cluster, aws, [(988, 988), (1018, 1023)], reverse=False)
    [finding] = run_checks(["fsx-unreachable"]).findings
    assert finding.evidence["directions_blocked"] == ["file system -> node"]
    assert finding.evidence["blocking_resource"] in (cluster.groups["head"], cluster.groups["efa"])


def test_fsx_without_file_systems_is_not_applicable_and_a_missing_configured_one_is_unverified(cluster, run_checks):
    report = run_checks(["fsx-unreachable"], checkpoints={"locations": ["fsx://fs-0123456789abcdef0/ckpt"]})
    assert [e.code for e in report.errors] == ["FileSystemNotFound"]
    assert report.skipped[0].reason.startswith("no FSx for Lustre file system")


def test_fsx_in_a_peered_vpc_named_in_config_is_checked_through_the_peering(cluster, aws, run_checks):
    b = cluster
    other = ClusterBuilder(b.ec2, "shared-services")
    other.vpc("172.31.0.0/16")
    other.subnet("a", "172.31.0.0/20", f"{REGION}a")
    vpc = "10.0.0.0/16"
    # The clients' VPC, and the file system's own subnet (the FSx guide's "or the full subnet CIDR").
    sg = other.security_group("fsx", ingress=[r for c in (vpc, "172.31.0.0/20") for p in ((988, 988), (1018, 1023))
                                              for r in tcp(p, cidr=c)])
    for client in (b.groups["head"], b.groups["efa"]):
        for ports in ((988, 988), (1018, 1023)):
            b.ec2.authorize_security_group_ingress(GroupId=client, IpPermissions=tcp(ports, cidr="172.31.0.0/16"))
    fs = aws.client("fsx").create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200,
                                              SubnetIds=[other.subnets["a"]], SecurityGroupIds=[sg])
    fs_id = fs["FileSystem"]["FileSystemId"]
    pcx = b.ec2.create_vpc_peering_connection(VpcId=b.vpc_id, PeerVpcId=other.vpc_id)["VpcPeeringConnection"]
    b.ec2.accept_vpc_peering_connection(VpcPeeringConnectionId=pcx["VpcPeeringConnectionId"])
    for table in b.route_tables.values():
        b.ec2.create_route(RouteTableId=table, DestinationCidrBlock="172.31.0.0/16",
                           VpcPeeringConnectionId=pcx["VpcPeeringConnectionId"])
    settings = {"checkpoints": {"locations": [f"fsx://{fs_id}/ckpt"]}}
    # The shared-services VPC routes nothing back yet.
    [finding] = run_checks(["fsx-unreachable"], **settings).findings
    assert finding.resource == fs_id and finding.evidence["code"] == "no-route"
    main = b.ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [other.vpc_id]}])["RouteTables"][0]
    b.ec2.create_route(RouteTableId=main["RouteTableId"], DestinationCidrBlock="10.0.0.0/16",
                       VpcPeeringConnectionId=pcx["VpcPeeringConnectionId"])
    # Its network ACLs and routes are read too, so the answer is a verified healthy one.
    report = run_checks(["fsx-unreachable"], **settings)
    assert report.findings == [] and report.errors == []


# -- s3-unreachable -----------------------------------------------------------------------------------------

def test_s3_without_endpoint_nat_or_igw(builder, run_checks):
    builder.security_group("g")
    builder.launch(["gpu-1", "gpu-2"], "m5.large", "private-a", ["g"])
    [finding] = run_checks(["s3-unreachable"]).findings
    ev = finding.evidence
    main = builder.ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [builder.vpc_id]}])
    assert finding.resource == main["RouteTables"][0]["RouteTableId"] == ev["route_table"]
    assert ev["code"] == "no-route" and ev["node_count"] == 2 and ev["exits"] == {}
    assert ev["fix"] == []  # no endpoint, NAT or internet gateway in the VPC to point a route at


def test_s3_egress_denied_by_a_network_acl(cluster, run_checks):
    b = cluster
    acl = b.network_acl(["private-a"], [acl_entry(100, True, "6", "allow", "10.0.0.0/8", (0, 65535)),
                                        acl_entry(100, False, "-1", "allow", "0.0.0.0/0")])
    [finding] = run_checks(["s3-unreachable"]).findings
    assert finding.resource == acl and finding.evidence["code"] == "nacl-deny"
    assert finding.evidence["node_count"] == 2  # the head node in public-a is fine


def test_s3_checkpoint_bucket_in_another_region_needs_nat_or_igw(aws, builder, run_checks):
    builder.route_table("private", ["private-a"])
    builder.s3_gateway_endpoint(["private"], REGION)
    builder.security_group("g")
    builder.launch(["gpu-1"], "m5.large", "private-a", ["g"])
    aws.client("s3", region_name="us-east-1").create_bucket(Bucket="ckpt-east")
    report = run_checks(["s3-unreachable"], checkpoints={"locations": ["s3://ckpt-east/llm/"]})
    [finding] = report.findings  # the regional S3 is fine through the endpoint; the bucket is not
    assert "ckpt-east" in finding.evidence["destination"] and finding.evidence["region"] == "us-east-1"
    assert finding.evidence["code"] == "no-route"


# -- efa-peer-unreachable -----------------------------------------------------------------------------------

def test_efa_peers_without_egress_rule(builder, run_checks):
    sg = builder.security_group("efa", self_ingress=True)
    builder.launch(["gpu-1", "gpu-2", "gpu-3"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    [finding] = run_checks(["efa-peer-unreachable"]).findings
    ev = finding.evidence
    assert finding.resource == sg and ev["code"] == "sg-egress-no-match" and ev["missing_direction"] == "outbound"
    assert ev["node_count"] == 3 and ev["class_pairs_blocked"] == 1
    assert ev["fix"] == [{"action": "authorize-security-group-egress", "group_id": sg, "ip_protocol": "-1",
                          "peer_group_id": sg}]


def test_efa_groups_referencing_each_other_are_fine_pairwise(builder, run_checks):
    """Per-node-group groups that reference each other admit EFA both ways: neither check reports anything."""
    a = builder.security_group("efa-a", self_ingress=True, self_egress=True)
    b = builder.security_group("efa-b", self_ingress=True, self_egress=True)
    for src, dst in ((a, b), (b, a)):
        pair = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": dst}]}]
        builder.ec2.authorize_security_group_ingress(GroupId=src, IpPermissions=pair)
        builder.ec2.authorize_security_group_egress(GroupId=src, IpPermissions=pair)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa-a"], efa_interfaces=4)
    builder.launch(["gpu-2"], "p4d.24xlarge", "private-a", ["efa-b"], efa_interfaces=4)
    report = run_checks(["efa-peer-unreachable", "efa-sg-self-reference"])
    assert report.findings == [] and report.errors == []


def test_efa_one_way_reference_names_the_missing_direction(builder, run_checks):
    a = builder.security_group("efa-a", self_ingress=True, self_egress=True)
    b = builder.security_group("efa-b", self_ingress=True, self_egress=True)
    builder.ec2.authorize_security_group_egress(GroupId=a, IpPermissions=[{"IpProtocol": "-1",
                                                                            "UserIdGroupPairs": [{"GroupId": b}]}])
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa-a"], efa_interfaces=4)
    builder.launch(["gpu-2"], "p4d.24xlarge", "private-a", ["efa-b"], efa_interfaces=4)
    findings = run_checks(["efa-peer-unreachable"]).findings
    blocked = {(f.resource, f.evidence["component"]) for f in findings}
    # a -> b: b admits nothing from a. b -> a: b has no egress to a.
    assert blocked == {(b, "sg-ingress"), (b, "sg-egress")}
    assert all(f.evidence["islands"] == 2 for f in findings)


def test_efa_pairs_across_subnets_are_left_to_efa_subnet_spread(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    builder.launch(["gpu-2"], "p4d.24xlarge", "private-b", ["efa"], efa_interfaces=4)
    report = run_checks(["efa-peer-unreachable", "efa-subnet-spread"])
    assert report.findings_for("efa-peer-unreachable") == []
    assert len(report.findings_for("efa-subnet-spread")) == 1


def test_efa_peer_check_needs_efa(builder, run_checks):
    builder.security_group("g")
    builder.launch(["n"], "m5.large", "private-a", ["g"])
    assert run_checks(["efa-peer-unreachable"]).skipped[0].reason == "the cluster has no EFA interfaces"


# -- AWS trouble ----------------------------------------------------------------------------------------------

def test_denied_topology_read_is_an_error_for_network_checks_only(cluster, run_with_faults, faults):
    faults.deny("ec2", "DescribeNetworkAcls")
    report = run_with_faults(NETWORK + ["efa-peer-unreachable"], network={"admin_cidrs": [OFFICE]})
    assert {(e.check, e.iam_action) for e in report.errors} == {
        (c, "ec2:DescribeNetworkAcls") for c in NETWORK}
    assert faults.injected["ec2.DescribeNetworkAcls"] == 1  # fetched once, the failure shared
    assert report.findings == [] and "efa-peer-unreachable" in report.stats.checks_run
    assert report.status.value == "warning"
