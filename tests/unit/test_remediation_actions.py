"""The other fix actions: NACL entries and drain tags (moto), HyperPod reboot/replace (Stubber), bad hints.

The checks here are test doubles that raise findings carrying the fix hints the reachability and health
checks produce (the action dicts of ``fmdoctor.remediation.actions``), so the whole plan -> apply -> verify path
runs for each action.
"""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from fmdoctor.config import Settings
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.aws import Aws
from fmdoctor.engine.check import Check
from fmdoctor.engine.model import Severity
from fmdoctor.engine.registry import Registry
from fmdoctor.remediation.actions import RemediationError, build_call
from fmdoctor.remediation.apply import apply_fix
from fmdoctor.remediation.approval import Approval
from fmdoctor.remediation.audit import AuditLog
from fmdoctor.remediation.plan import plan_fix
from fmdoctor.remediation.preflight import preflight

CLUSTER = "test-cluster"
ADMIN = "203.0.113.0/24"


class NaclAdmitsSsh(Check):
    """Test double: the network ACL in extras['acl'] admits SSH from the admin CIDR (rule 100)."""

    id = "test-nacl-ssh"
    family = "test"
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeNetworkAcls",)

    def run(self, ctx):
        acl = ctx.scope.extras["acl"]
        [found] = ctx.client("ec2").describe_network_acls(NetworkAclIds=[acl])["NetworkAcls"]
        if any(e["RuleNumber"] == 100 and not e["Egress"] and e["RuleAction"] == "allow" for e in found["Entries"]):
            return []
        hint = {"action": "create-network-acl-entry", "network_acl_id": acl, "rule_number": 100, "egress": False,
                "protocol": "tcp", "from_port": 22, "to_port": 22, "cidr": ADMIN, "rule_action": "allow"}
        return [self.finding(acl, "The NACL drops SSH from the admins.", {"network_acl": acl, "fix": [hint]})]


class DrainTagged(Check):
    """Test double: every node tagged test:bad=1 carries fmdoctor:drain=true."""

    id = "test-drain"
    family = "test"
    severity = Severity.WARNING
    iam_actions = ("ec2:DescribeInstances",)

    def run(self, ctx):
        return [self.finding(n.id, "Drain it.", {"instance": n.id, "fix": [
            {"action": "tag-instance", "instance_id": n.id, "tags": {"fmdoctor:drain": "true"}}]})
            for n in ctx.inventory.instances if n.tags.get("test:bad") and n.tags.get("fmdoctor:drain") != "true"]


class HyperPodNodeFailed(Check):
    """Test double: no node of the HyperPod cluster 'hp' is in the Failure state."""

    id = "test-hyperpod"
    family = "test"
    severity = Severity.CRITICAL
    iam_actions = ("sagemaker:ListClusterNodes",)

    def run(self, ctx):
        nodes = ctx.client("sagemaker").list_cluster_nodes(ClusterName="hp")["ClusterNodeSummaries"]
        return [self.finding(n["InstanceId"], "Replace it.", {"node": n["InstanceId"], "fix": [
            {"action": ctx.scope.extras["hyperpod_action"], "cluster_name": "hp", "node_id": n["InstanceId"]}]})
            for n in nodes if n["InstanceStatus"]["Status"] == "Failure"]


@pytest.fixture
def audit(tmp_path):
    return AuditLog(tmp_path / "audit.jsonl")


def doctor(extras=None, aws_factory=new_aws) -> Doctor:
    return Doctor(settings=Settings.model_validate({"clusters": {CLUSTER: {}}}),
                  connection=Connection(region="us-west-2"),
                  registry=Registry([NaclAdmitsSsh, DrainTagged, HyperPodNodeFailed]), extras=extras or {},
                  aws_factory=aws_factory)


def fix(d, check, audit):
    plan = plan_fix(d, CLUSTER, check, audit=audit)
    assert preflight(d, plan, audit=audit).passed
    return plan, apply_fix(d, plan, Approval.grant(plan, "alice", "test"), audit=audit, verify_delays=())


def test_network_acl_entry_fix_is_idempotent_and_its_dry_run_changes_nothing(builder, audit):
    builder.launch(["node"], "m5.large", "private-a", [builder.security_group("plain")])
    acl = builder.ec2.create_network_acl(VpcId=builder.vpc_id)["NetworkAcl"]["NetworkAclId"]

    def entries():
        return builder.ec2.describe_network_acls(NetworkAclIds=[acl])["NetworkAcls"][0]["Entries"]

    before = entries()
    d = doctor({"acl": acl})
    plan = plan_fix(d, CLUSTER, "test-nacl-ssh", audit=audit)
    assert plan.calls[0]["params"] == {"NetworkAclId": acl, "RuleNumber": 100, "Protocol": "6", "RuleAction": "allow",
                                       "Egress": False, "CidrBlock": ADMIN, "PortRange": {"From": 22, "To": 22}}
    assert [c.status for c in preflight(d, plan, audit=audit).checks] == ["allowed"]
    assert entries() == before  # DryRun made no entry

    plan, result = fix(d, "test-nacl-ssh", audit)
    assert result.ok and [o.status for o in result.outcomes] == ["applied"]
    assert plan_fix(d, CLUSTER, "test-nacl-ssh", audit=audit).empty
    # The approved plan applied a second time: AlreadyExists with the same entry counts as done.
    again = apply_fix(d, plan, Approval.grant(plan, "alice", "test"), audit=audit, verify_delays=())
    assert [o.status for o in again.outcomes] == ["already-present"] and again.ok


def test_network_acl_rule_number_taken_by_another_entry_is_a_conflict(builder, audit):
    builder.launch(["node"], "m5.large", "private-a", [builder.security_group("plain")])
    acl = builder.ec2.create_network_acl(VpcId=builder.vpc_id)["NetworkAcl"]["NetworkAclId"]
    builder.ec2.create_network_acl_entry(NetworkAclId=acl, RuleNumber=100, Protocol="6", RuleAction="deny",
                                         Egress=False, CidrBlock="0.0.0.0/0", PortRange={"From": 22, "To": 22})
    plan = plan_fix(doctor({"acl": acl}), CLUSTER, "test-nacl-ssh", audit=audit)
    assert plan.empty and plan.findings
    [conflict] = plan.conflicts
    assert "rule number 100 is already used by a different entry (deny protocol 6" in conflict["reason"]


def test_drain_tag_fix(builder, audit):
    [bad] = builder.launch(["bad"], "m5.large", "private-a", [builder.security_group("plain")],
                           extra_tags={"test:bad": "1"})
    builder.launch(["good"], "m5.large", "private-a", ["plain"])
    d = doctor()
    plan, result = fix(d, "test-drain", audit)
    assert plan.calls[0]["params"] == {"Resources": [bad], "Tags": [{"Key": "fmdoctor:drain", "Value": "true"}]}
    assert result.ok
    tags = builder.ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [bad]}])["Tags"]
    assert {"Key": "fmdoctor:drain", "ResourceId": bad, "ResourceType": "instance", "Value": "true"} in tags
    assert plan_fix(d, CLUSTER, "test-drain", audit=audit).empty


class StubbedAws(Aws):
    """moto has no BatchRebootClusterNodes/BatchReplaceClusterNodes: SageMaker answers come from a Stubber
    (responses shaped like the real API); EC2 still comes from moto."""

    def __init__(self, options, sagemaker):
        super().__init__(boto3.Session(region_name="us-west-2"), options)
        self._sagemaker = sagemaker

    def client(self, service):
        return self._sagemaker if service == "sagemaker" else super().client(service)


NODE, OTHER = "i-0123456789abcdef0", "i-0fedcba9876543210"


def nodes(*states):
    return {"ClusterNodeSummaries": [
        {"InstanceGroupName": "workers", "InstanceId": node, "InstanceType": "ml.p5.48xlarge",
         "LaunchTime": datetime(2025, 1, 1, tzinfo=UTC), "InstanceStatus": {"Status": state}}
        for node, state in zip((NODE, OTHER), states, strict=False)]}


@pytest.fixture
def sagemaker(builder):
    builder.launch(["node"], "m5.large", "private-a", [builder.security_group("plain")])  # the cluster's inventory
    client = boto3.client("sagemaker", region_name="us-west-2")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize("action, operation", [("reboot-hyperpod-node", "batch_reboot_cluster_nodes"),
                                               ("replace-hyperpod-node", "batch_replace_cluster_nodes")])
def test_hyperpod_node_fix_is_one_batched_call(sagemaker, audit, action, operation):
    client, stubber = sagemaker
    listing = {"ClusterName": "hp"}
    stubber.add_response("list_cluster_nodes", nodes("Failure", "Failure"), listing)  # the check, while planning
    stubber.add_response("list_cluster_nodes", nodes("Failure", "Failure"), listing)  # the plan's current state
    stubber.add_response(operation, {"Successful": [NODE, OTHER], "Failed": []},
                         {"ClusterName": "hp", "NodeIds": [NODE, OTHER]})
    stubber.add_response("list_cluster_nodes", nodes("Pending", "Pending"), listing)  # verification
    d = doctor({"hyperpod_action": action}, aws_factory=lambda options: StubbedAws(options, client))
    plan, result = fix(d, "test-hyperpod", audit)
    checked = [r for r in audit.read() if r["event"] == "preflight"][-1]
    assert checked["outcome"] == "no dry run"  # SageMaker has no DryRun: the pre-flight says so, never "ok"
    [call] = plan.calls
    assert (call["destructive"], call["idempotent"], call["dry_run"]) == (True, False, False)
    assert call["params"] == {"ClusterName": "hp", "NodeIds": [NODE, OTHER]} and len(call["findings"]) == 2
    assert result.ok and [o.status for o in result.outcomes] == ["applied"]


def test_hyperpod_partial_failure_and_nodes_already_recovering(sagemaker, audit):
    client, stubber = sagemaker
    listing = {"ClusterName": "hp"}
    stubber.add_response("list_cluster_nodes", nodes("Failure", "Failure"), listing)
    stubber.add_response("list_cluster_nodes", nodes("Failure", "Pending"), listing)  # OTHER is already rebooting
    stubber.add_response("batch_reboot_cluster_nodes",
                         {"Failed": [{"NodeId": NODE, "ErrorCode": "InvalidInstanceStatus",
                                                        "Message": "node is in a state that cannot be rebooted"}]},
                         {"ClusterName": "hp", "NodeIds": [NODE]})
    stubber.add_response("list_cluster_nodes", nodes("Failure", "Pending"), listing)
    d = doctor({"hyperpod_action": "reboot-hyperpod-node"}, aws_factory=lambda options: StubbedAws(options, client))
    plan = plan_fix(d, CLUSTER, "test-hyperpod", audit=audit)
    assert plan.calls[0]["params"]["NodeIds"] == [NODE]
    assert "is Pending: a reboot or replacement is under way" in plan.satisfied[0]["reason"]
    [check] = preflight(d, plan, audit=audit).checks
    assert check.status == "not-checked"  # no DryRun for SageMaker: said, not assumed
    result = apply_fix(d, plan, Approval.grant(plan, "alice", "test"), audit=audit, verify_delays=())
    [outcome] = result.outcomes
    assert outcome.status == "failed" and "InvalidInstanceStatus" in outcome.detail
    # The reboot failed: nothing asynchronous is under way for NODE, so its finding is still present, not pending.
    assert result.verification.status == "still-present" and not result.ok
    assert [f.split("/")[-1] for f in result.verification.remaining] == [NODE]


@pytest.mark.parametrize("hint, problem", [
    ({"action": "authorize-security-group-ingress", "group_id": "sg-1", "ip_protocol": "-1",
      "peer_group_id": "sg-0123456789abcdef0"}, "group_id must match"),
    ({"action": "authorize-security-group-ingress", "group_id": "sg-0123456789abcdef0", "ip_protocol": "tcp",
      "from_port": 22, "to_port": 22}, "exactly one of cidr"),
    ({"action": "authorize-security-group-ingress", "group_id": "sg-0123456789abcdef0", "ip_protocol": "tcp",
      "from_port": 22, "to_port": 70000, "cidr": ADMIN}, "to_port must be a port"),
    ({"action": "authorize-security-group-egress", "group_id": "sg-0123456789abcdef0", "ip_protocol": "gre",
      "cidr": ADMIN}, "ip_protocol must be"),
    ({"action": "create-network-acl-entry", "network_acl_id": "acl-0123456789abcdef0", "rule_number": 100,
      "egress": False, "protocol": "tcp", "from_port": 22, "to_port": 22, "cidr": ADMIN, "rule_action": "deny"},
     "only adds 'allow'"),
    ({"action": "create-network-acl-entry", "network_acl_id": "acl-0123456789abcdef0", "rule_number": 100,
      "egress": "no", "protocol": "tcp", "cidr": ADMIN, "rule_action": "allow"}, "egress must be"),
    ({"action": "tag-instance", "instance_id": "i-0123456789abcdef0", "tags": {"aws:x": "1"}}, "not allowed"),
    ({"action": "reboot-hyperpod-node", "cluster_name": "hp", "node_id": "node-1"}, "node_id must match"),
])
def test_bad_hints_are_refused_before_any_call(hint, problem):
    with pytest.raises(RemediationError, match=problem):
        build_call(hint, "some-check", "some-check/x")


def test_unknown_actions_are_left_to_the_runbook_and_ports_are_exact():
    assert build_call({"action": "resize-the-moon"}, "c", "c/x") is None
    call = build_call({"action": "authorize-security-group-ingress", "group_id": "sg-0123456789abcdef0",
                       "ip_protocol": "tcp", "from_port": 988, "to_port": 988, "cidr": "10.0.0.0/16"}, "c", "c/x")
    assert call.params["IpPermissions"] == [{"IpProtocol": "tcp", "FromPort": 988, "ToPort": 988, "IpRanges": [
        {"CidrIp": "10.0.0.0/16", "Description": "fmdoctor fix c"}]}]
    assert call.summary == "allow tcp/988 into sg-0123456789abcdef0 from 10.0.0.0/16"
