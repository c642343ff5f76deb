"""Network ACL replies, FSx for Lustre's own rules and S3 Express paths, on clusters built in moto.

Rules: the VPC guide's ephemeral ports (nacl-ephemeral-ports.html: the client chooses the range; Linux
kernels, Windows Server 2008+, NAT gateways and ELB 1024-65535; "you can open ephemeral ports 1024-65535"), the
FSx for Lustre guide (cannot-create-fs.html: 988 and 1018-1023 "from the security group itself or the full
subnet CIDR", and for EFA-enabled file systems all traffic to and from the group itself and the clients'), the
S3 guide's directory-bucket networking (s3-express-networking.html) and GetBucketLocation's "not supported for
directory buckets", and the VPC guide's default endpoint policy (vpc-endpoints-access.html).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from fmdoctor.config import Settings
from fmdoctor.demo.builders import ClusterBuilder, acl_entry
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.model import Severity, Status
from fmdoctor.net import model as m
from fmdoctor.net.reachability import why_not
from fmdoctor.report.reachability import render_reachability

REGION = "us-west-2"
OFFICE = "203.0.113.0/24"
VPC = "10.0.0.0/16"
DIRECTORY_BUCKET = "ckpt--usw2-az1--x-s3"


def tcp(ports: tuple[int, int], group: str | None = None, cidr: str | None = None) -> list[dict[str, Any]]:
    peer = {"UserIdGroupPairs": [{"GroupId": group}]} if group else {"IpRanges": [{"CidrIp": cidr}]}
    return [{"IpProtocol": "tcp", "FromPort": ports[0], "ToPort": ports[1], **peer}]


def ask(source: str, destination: str, port: Any = None, protocol: str = "tcp") -> m.ReachabilityResult:
    doctor = Doctor(settings=Settings.model_validate({"clusters": {"test-cluster": {}}}),
                    connection=Connection(region=REGION))
    return why_not(doctor, "test-cluster", source, destination, port, protocol)


@pytest.fixture
def head(builder: ClusterBuilder) -> ClusterBuilder:
    """A head node in public-a with a public IP, SSH from the office; private-a reaches S3 through its endpoint."""
    builder.internet_gateway(["public-a"])
    builder.route_table("private", ["private-a"])
    builder.s3_gateway_endpoint(["private"], REGION)
    builder.security_group("head", ingress=tcp((22, 22), cidr=OFFICE))
    builder.launch(["head"], "m5.8xlarge", "public-a", ["head"], role="head", public_ip=True)
    return builder


def public_acl(b: ClusterBuilder, replies: tuple[int, int] | None) -> str:
    """public-a's ACL: SSH in from anywhere, replies out on ``replies`` (None: only HTTPS out)."""
    out = [acl_entry(100, True, "6", "allow", "0.0.0.0/0", replies or (443, 443))]
    return b.network_acl(["public-a"], [acl_entry(100, False, "6", "allow", "0.0.0.0/0", (22, 22)), *out])


# -- reply ports -------------------------------------------------------------------------------------------------

def test_replies_on_1024_65535_reach_every_client(head, run_checks):
    public_acl(head, (1024, 65535))
    report = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE]})
    assert report.findings == [] and report.errors == []


def test_replies_on_32768_65535_are_a_warning_naming_who_fails(head, run_checks):
    """AWS's own example range: Linux, Windows and macOS admins get in, admins behind a NAT may not."""
    acl = public_acl(head, (32768, 65535))
    report = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE]})
    [finding] = report.findings
    ev = finding.evidence
    assert finding.severity is Severity.WARNING and report.status is Status.WARNING
    assert (ev["code"], ev["blocking_resource"], ev["direction"]) == (m.NACL_REPLY_PORTS, acl, "return")
    assert ev["clients_failing"] == ["clients behind a NAT gateway or load balancer, and Lambda (1024-65535)"]
    assert len(ev["clients_reached"]) == 2 and ev["ports_dropped"] == "1024-32767"
    assert ev["admin_cidrs_affected"] == [OFFICE]
    [fix] = ev["fix"]
    assert (fix["action"], fix["egress"], fix["from_port"], fix["to_port"]) == (
        "create-network-acl-entry", True, 1024, 32767)
    result = ask(OFFICE, "head", 22)
    assert result.reachable is True and [w.code for w in result.warnings] == [m.NACL_REPLY_PORTS]
    assert result.to_json_dict()["warnings"][0]["evidence"]["clients_failing"] == ev["clients_failing"]
    text = render_reachability(result)
    assert text.startswith("REACHABLE") and f"warning: nacl-reply-ports at nacl-out {acl}" in text


def test_replies_on_no_common_client_range_are_critical(head, run_checks):
    acl = public_acl(head, None)
    [finding] = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE]}).findings
    assert finding.severity is Severity.CRITICAL
    assert (finding.evidence["code"], finding.evidence["blocking_resource"]) == (m.NACL_DENY, acl)
    assert finding.evidence["fix"][0]["from_port"] == 1024 and finding.evidence["fix"][0]["to_port"] == 65535


def test_a_linux_node_needs_only_the_linux_range_back(head, run_checks):
    """The node is the client of S3: its own (Linux) ephemeral ports are all a reply rule must admit."""
    head.security_group("gpu")
    head.launch(["gpu-1"], "m5.large", "private-a", ["gpu"])
    acl = head.network_acl(["private-a"], [acl_entry(100, True, "6", "allow", "0.0.0.0/0", (443, 443)),
                                          acl_entry(100, False, "6", "allow", "0.0.0.0/0", (32768, 65535))])
    assert run_checks(["s3-unreachable"]).findings == []
    head.ec2.replace_network_acl_entry(NetworkAclId=acl, RuleNumber=100, Protocol="6", RuleAction="allow",
                                       Egress=False, CidrBlock="0.0.0.0/0", PortRange={"From": 49152, "To": 65535})
    [finding] = run_checks(["s3-unreachable"]).findings
    assert finding.severity is Severity.WARNING and finding.evidence["code"] == m.NACL_REPLY_PORTS
    assert finding.evidence["clients_failing"] == ["Linux clients (32768-60999)"]
    assert finding.evidence["ports_dropped"] == "32768-49151"


# -- FSx for Lustre ------------------------------------------------------------------------------------------------

def lustre(b: ClusterBuilder, aws: Any, *, self_rules: bool = True, efa: bool = False, subnet: str = "private-a",
           client_groups: tuple[str, ...] = ("nodes",)) -> str:
    """A file system whose group admits the clients on 988 and 1018-1023 (and itself, unless ``self_rules`` is
    off); the clients' group admits it back, as the FSx guide's client rules ask."""
    clients = [b.groups[g] for g in client_groups]
    sg = b.security_group("fsx", ingress=[r for g in clients for p in ((988, 988), (1018, 1023))
                                          for r in tcp(p, group=g)])
    if self_rules:
        b.ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=tcp((988, 988), group=sg)
                                               + tcp((1018, 1023), group=sg))
    for client in clients:
        b.ec2.authorize_security_group_ingress(GroupId=client, IpPermissions=tcp((988, 988), group=sg)
                                               + tcp((1018, 1023), group=sg))
    config: dict[str, Any] = {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250}
    if efa:
        config["EfaEnabled"] = True
    return aws.client("fsx").create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200,
                                               SubnetIds=[b.subnets[subnet]], SecurityGroupIds=[sg],
                                               LustreConfiguration=config)["FileSystem"]["FileSystemId"]


@pytest.fixture
def nodes(builder: ClusterBuilder) -> ClusterBuilder:
    builder.security_group("nodes", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "private-a", ["nodes"], efa_interfaces=32, efa_only=True)
    return builder


def test_lustre_tight_acls_on_both_subnets_are_enough(nodes, aws, run_checks):
    """988 and 1018-1023 both ways: LNet connects from 1018-1023, so its replies need nothing else."""
    fs = lustre(nodes, aws, subnet="public-a")
    entries = [acl_entry(n + i, egress, "6", "allow", VPC, ports) for i, ports in enumerate(((988, 988), (1018, 1023)))
               for n, egress in ((100, False), (200, True))]
    nodes.network_acl(["private-a", "public-a"], entries)
    report = run_checks(["fsx-unreachable"])
    assert report.findings == [] and report.errors == []
    assert ask("gpu-1", fs).reachable is True


def test_an_acl_open_on_988_only_drops_lustre_replies(nodes, aws, run_checks):
    fs = lustre(nodes, aws, subnet="public-a")
    acl = nodes.network_acl(["public-a"], [acl_entry(100, False, "6", "allow", VPC, (988, 988)),
                                           acl_entry(100, True, "6", "allow", VPC, (988, 988))])
    [finding] = run_checks(["fsx-unreachable"]).findings
    assert finding.resource == fs and finding.severity is Severity.CRITICAL
    assert (finding.evidence["code"], finding.evidence["blocking_resource"]) == (m.NACL_DENY, acl)


def test_file_servers_must_admit_each_other(nodes, aws, run_checks):
    fs = lustre(nodes, aws, self_rules=False)
    [finding] = run_checks(["fsx-unreachable"]).findings
    ev = finding.evidence
    assert finding.resource == fs and ev["directions_blocked"] == ["file server -> file server"]
    assert ev["code"] == m.SG_INGRESS and ev["node_count"] == 0
    assert {(f["from_port"], f["to_port"]) for f in ev["fix"]} == {(988, 988), (1018, 1023)}
    assert {f["peer_group_id"] for f in ev["fix"]} == {ev["blocking_resource"]}  # its own group


def test_an_efa_enabled_file_system_needs_all_traffic_rules(nodes, aws, run_checks):
    fs = lustre(nodes, aws, efa=True)
    [finding] = run_checks(["fsx-unreachable"]).findings
    ev = finding.evidence
    assert finding.resource == fs and ev["efa_enabled"] is True
    assert set(ev["directions_blocked"]) >= {"node -> file system (EFA)", "file server -> file server (EFA)"}
    assert all(f["ip_protocol"] == "-1" for f in ev["fix"])
    # The FSx guide's EFA rules: all traffic to and from the file system's group itself and the clients'.
    sg, client = ev["blocking_resource"], nodes.groups["nodes"]
    for group, peer in ((sg, sg), (sg, client), (client, sg)):
        nodes.ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": peer}]}])
        nodes.ec2.authorize_security_group_egress(GroupId=group, IpPermissions=[
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": peer}]}])
    report = run_checks(["fsx-unreachable"])
    assert report.findings == [] and report.errors == []


# -- S3 Express One Zone and endpoint policies --------------------------------------------------------------------

@pytest.fixture
def private(builder: ClusterBuilder) -> ClusterBuilder:
    builder.route_table("private", ["private-a"])
    builder.s3_gateway_endpoint(["private"], REGION)
    builder.security_group("nodes")
    builder.launch(["gpu-1"], "m5.large", "private-a", ["nodes"])
    return builder


def test_a_directory_bucket_through_an_s3express_gateway_endpoint(private, run_checks):
    private.s3_gateway_endpoint(["private"], REGION, service="s3express")
    report = run_checks(["s3-unreachable"], checkpoints={"locations": [f"s3://{DIRECTORY_BUCKET}/llm/"]})
    assert report.findings == [] and report.errors == []
    assert "s3.GetBucketLocation" not in report.stats.api_calls  # not supported for directory buckets
    result = ask("gpu-1", f"s3://{DIRECTORY_BUCKET}")
    assert result.reachable is True and result.destination.service == "s3express"
    assert any(h.component == "vpc-endpoint" and h.resource == private.gateways["s3express"] for h in result.hops)


def test_an_s3_gateway_endpoint_does_not_serve_a_directory_bucket(private, run_checks):
    report = run_checks(["s3-unreachable"], checkpoints={"locations": [f"s3://{DIRECTORY_BUCKET}/llm/"]})
    [finding] = report.findings  # general-purpose S3 is fine through its endpoint; S3 Express is not
    ev = finding.evidence
    assert (ev["code"], ev["service"], ev["target"]) == (m.NO_ROUTE, "s3express", f"s3://{DIRECTORY_BUCKET}")
    assert "S3 Express One Zone, usw2-az1" in ev["destination"]
    assert "s3.GetBucketLocation" not in report.stats.api_calls


def test_a_gateway_endpoint_with_a_custom_policy_is_not_verified(builder, run_checks):
    policy = json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:*",
                                        "Resource": ["arn:aws:s3:::ckpt", "arn:aws:s3:::ckpt/*"]}]})
    builder.route_table("private", ["private-a"])
    builder.s3_gateway_endpoint(["private"], REGION, policy=policy)
    builder.security_group("nodes")
    builder.launch(["gpu-1"], "m5.large", "private-a", ["nodes"])
    report = run_checks(["s3-unreachable"])
    assert report.findings == []
    [error] = report.errors
    assert error.code == "NotEvaluated" and "custom endpoint policy" in error.message
    assert report.status is Status.WARNING  # not verified is never healthy


# -- every new verdict's runbook renders with the finding's own values ----------------------------------------------

def _rendered(finding) -> str:
    from fmdoctor.runbooks import get_runbook

    return get_runbook(finding.runbook).render(finding, cluster="test-cluster", region=REGION)


def test_runbooks_render_the_warning_and_new_variants(head, aws, run_checks):
    public_acl(head, (32768, 65535))
    [ssh] = run_checks(["ssh-unreachable"], network={"admin_cidrs": [OFFICE]}).findings
    text = _rendered(ssh)
    assert "reach TCP 22" in text and "1024-32767" in text and "--rule-number" in text
    head.security_group("nodes", self_ingress=True, self_egress=True)
    head.launch(["gpu-1"], "p5.48xlarge", "private-a", ["nodes"], efa_interfaces=32)
    head.launch(["prep-1"], "c6i.32xlarge", "private-a", ["nodes"])
    lustre(head, aws, self_rules=False)
    report = run_checks(["efa-not-attached", "fsx-unreachable", "s3-unreachable"],
                        checkpoints={"locations": [f"s3://{DIRECTORY_BUCKET}/llm/"]})
    by_check = {f.check: f for f in report.findings}
    assert "expected unless they run MPI" in by_check["efa-not-attached"].summary
    assert "`info`, not a fault" in _rendered(by_check["efa-not-attached"])
    fsx = _rendered(by_check["fsx-unreachable"])
    assert "file server -> file server" in fsx and "from the security group itself" in fsx
    s3 = _rendered(by_check["s3-unreachable"])
    assert "S3 Express One Zone directory bucket" in s3 and f"--to s3://{DIRECTORY_BUCKET}" in s3
