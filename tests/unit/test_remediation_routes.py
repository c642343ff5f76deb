"""Route fixes through the whole plan -> DryRun -> apply -> verify path, driven by the real s3-unreachable check.

moto ignores DryRun on these calls and does not add a gateway endpoint's route when a table is added to it;
fmdoctor.demo.moto_routes (installed by tests/conftest.py) makes it answer as EC2 does.
"""

from __future__ import annotations

import json

import pytest

from fmdoctor.cli.main import main
from fmdoctor.config import Settings
from fmdoctor.demo.builders import ClusterBuilder
from fmdoctor.engine.api import Connection, Doctor
from fmdoctor.engine.registry import default_registry
from fmdoctor.iam_policy import iam_policy
from fmdoctor.remediation.actions import RemediationError, build_call
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.approval import Approval
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.remediation.plan import plan_fix
from fmdoctor.remediation.preflight import preflight
from fmdoctor.runbooks import list_runbooks

CLUSTER = "test-cluster"
REGION = "us-west-2"
CHECK = "s3-unreachable"


@pytest.fixture
def audit(tmp_path):
    return AuditLog(tmp_path / "audit.jsonl")


@pytest.fixture
def vpc(builder: ClusterBuilder) -> ClusterBuilder:
    """A node in private-b on the main table (local route only); public-a has an IGW and a NAT gateway."""
    builder.internet_gateway(["public-a"])
    builder.nat_gateway("public-a")
    builder.security_group("g")
    builder.launch(["gpu-1"], "m5.large", "private-b", ["g"])
    return builder


def doctor() -> Doctor:
    return Doctor(settings=Settings.model_validate({"clusters": {CLUSTER: {}}}), connection=Connection(region=REGION))


def routes(b: ClusterBuilder, table: str) -> list[dict]:
    return b.ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"][0]["Routes"]


def fix(d: Doctor, audit: AuditLog):
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    return plan, apply_fix(d, plan, Approval.grant(plan, "alice", "test"), audit=audit, verify_delays=())


def test_missing_route_out_is_fixed_with_a_route_to_the_nat_gateway(vpc, audit):
    main_table = vpc.main_route_table()
    before = routes(vpc, main_table)
    d = doctor()
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    assert plan.calls[0]["operation"] == "CreateRoute"
    assert plan.calls[0]["params"] == {"RouteTableId": main_table, "DestinationCidrBlock": "0.0.0.0/0",
                                       "NatGatewayId": vpc.gateways["nat"]}
    assert [c.status for c in preflight(d, plan, audit=audit).checks] == ["allowed"]
    assert routes(vpc, main_table) == before  # DryRun changed nothing

    plan, result = fix(d, audit)
    assert result.ok and [o.status for o in result.outcomes] == ["applied"]
    assert result.verification.status == "verified"
    assert plan_fix(d, CLUSTER, CHECK, audit=audit).empty
    again = apply_fix(d, plan, Approval.grant(plan, "alice", "test"), audit=audit, verify_delays=())
    assert [o.status for o in again.outcomes] == ["already-present"] and again.ok  # RouteAlreadyExists, same


def test_s3_gateway_endpoint_gets_the_missing_route_table(vpc, audit):
    private = vpc.route_table("private", ["private-a"])
    endpoint = vpc.s3_gateway_endpoint(["private"], REGION)
    main_table = vpc.main_route_table()
    d = doctor()
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    assert plan.calls[0]["operation"] == "ModifyVpcEndpoint"
    assert plan.calls[0]["params"] == {"VpcEndpointId": endpoint, "AddRouteTableIds": [main_table]}
    assert preflight(d, plan, audit=audit).ok
    assert not any(r.get("GatewayId") == endpoint for r in routes(vpc, main_table))
    _, result = fix(d, audit)
    assert result.verification.status == "verified"
    assert any(r.get("GatewayId") == endpoint and r.get("DestinationPrefixListId") for r in routes(vpc, main_table))
    endpoints = vpc.ec2.describe_vpc_endpoints(VpcEndpointIds=[endpoint])["VpcEndpoints"]
    assert set(endpoints[0]["RouteTableIds"]) == {private, main_table}
    assert plan_fix(d, CLUSTER, CHECK, audit=audit).empty


def test_route_to_a_deleted_nat_gateway_is_replaced(vpc, audit):
    old = vpc.gateways["nat"]
    table = vpc.route_table("private", ["private-b"], [{"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": old}])
    vpc.ec2.delete_nat_gateway(NatGatewayId=old)
    new = vpc.nat_gateway("public-a")
    d = doctor()
    plan = plan_fix(d, CLUSTER, CHECK, audit=audit)
    assert [(c["operation"], c["params"]) for c in plan.calls] == [
        ("ReplaceRoute", {"RouteTableId": table, "DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": new})]
    _, result = fix(d, audit)
    assert result.ok and result.verification.status == "verified"


def test_route_conflicts_are_found_before_any_call(vpc, audit):
    from fmdoctor.remediation.current import reconcile

    table = vpc.main_route_table()
    vpc.ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=vpc.gateways["igw"])
    create = build_call({"action": "create-route", "route_table_id": table, "destination": "0.0.0.0/0",
                         "nat_gateway_id": vpc.gateways["nat"]}, CHECK, "f")
    replace = build_call({"action": "replace-route", "route_table_id": table, "destination": "198.51.100.0/24",
                          "nat_gateway_id": vpc.gateways["nat"]}, CHECK, "f")
    gone = build_call({"action": "modify-vpc-endpoint", "vpc_endpoint_id": "vpce-0123456789abcdef0",
                       "add_route_table_ids": [table]}, CHECK, "f")
    state = reconcile(doctor().connect(doctor().cluster_settings(CLUSTER)), [create, replace, gone])
    reasons = [reason for _, reason in state.conflicts]
    assert state.calls == [] and len(reasons) == 3
    assert f"already routes 0.0.0.0/0 to {vpc.gateways['igw']}" in reasons[0]
    assert "no route for 198.51.100.0/24 to replace" in reasons[1]
    assert "vpce-0123456789abcdef0 no longer exists" in reasons[2]


@pytest.mark.parametrize("hint, problem", [
    ({"action": "create-route", "route_table_id": "rtb-1", "destination": "0.0.0.0/0",
      "gateway_id": "igw-0123456789abcdef0"}, "route_table_id must match"),
    ({"action": "create-route", "route_table_id": "rtb-0123456789abcdef0", "destination": "10.0.0.1/16",
      "gateway_id": "igw-0123456789abcdef0"}, "destination must be an IPv4 CIDR"),
    ({"action": "create-route", "route_table_id": "rtb-0123456789abcdef0", "destination": "0.0.0.0/0",
      "gateway_id": "igw-0123456789abcdef0", "nat_gateway_id": "nat-0123456789abcdef0"}, "exactly one of"),
    ({"action": "replace-route", "route_table_id": "rtb-0123456789abcdef0", "destination": "0.0.0.0/0",
      "gateway_id": "nat-0123456789abcdef0"}, "gateway_id must match"),
    ({"action": "modify-vpc-endpoint", "vpc_endpoint_id": "vpce-0123456789abcdef0", "add_route_table_ids": []},
     "list of 1 to 20"),
    ({"action": "modify-vpc-endpoint", "vpc_endpoint_id": "vpce-0123456789abcdef0",
      "add_route_table_ids": ["rtb-0123456789abcdef0; rm -rf /"]}, "must match"),
])
def test_bad_route_hints_are_refused(hint, problem):
    with pytest.raises(RemediationError, match=problem):
        build_call(hint, CHECK, f"{CHECK}/x")


def test_iam_policy_grants_the_route_fixes_and_their_reads():
    policy, warnings = iam_policy(default_registry(), list_runbooks(), remediation=True)
    assert warnings == []
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["Ec2RouteTable"] == {"Sid": "Ec2RouteTable", "Effect": "Allow", "Resource":
                                       "arn:aws:ec2:*:*:route-table/*",
                                       "Action": ["ec2:CreateRoute", "ec2:ReplaceRoute"]}
    assert by_sid["Ec2"]["Resource"] == "*"
    assert {"ec2:ModifyVpcEndpoint", "ec2:DescribeRouteTables", "ec2:DescribeVpcEndpoints"} <= set(
        by_sid["Ec2"]["Action"])
    only_checks, _ = iam_policy(default_registry(), list_runbooks(), remediation=False)
    assert not any(a in ("ec2:CreateRoute", "ec2:ModifyVpcEndpoint") for s in only_checks["Statement"]
                   for a in s["Action"])


def test_demo_s3_fault_is_fixed_and_verified(capsys, tmp_path):
    code = main(["fix", "--demo", "--check", CHECK, "--yes", "--format", "json", "--audit-log",
                 str(tmp_path / "a.jsonl")])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    assert [c["operation"] for c in data["plan"]["calls"]] == ["ModifyVpcEndpoint"]
    assert data["result"]["verification"]["status"] == "verified"
