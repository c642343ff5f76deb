"""EFA checks against moto: each id with failing cases and a healthy cluster that must yield nothing."""

from __future__ import annotations

import pytest

from fmdoctor.engine.model import Severity, Status

EFA_IDS = ["efa-sg-self-reference", "efa-subnet-spread", "efa-not-attached", "efa-missing-interfaces",
           "placement-group"]


def test_healthy_cluster_has_no_efa_findings(healthy_efa_cluster, run_checks):
    report = run_checks(EFA_IDS)
    assert report.findings == []
    assert report.errors == []
    assert report.status is Status.OK
    assert report.stats.checks_run == EFA_IDS


def _self(group_id, protocol="-1", **ports):
    return [{"IpProtocol": protocol, "UserIdGroupPairs": [{"GroupId": group_id}], **ports}]


@pytest.mark.parametrize(
    "ingress, egress, missing",
    [
        (_self, None, ["egress"]),  # the default 0.0.0.0/0 egress does not count
        (None, _self, ["ingress"]),
        (None, None, ["ingress", "egress"]),
        # a TCP-only self rule does not admit SRD
        (lambda g: _self(g, "tcp", FromPort=0, ToPort=65535), _self, ["ingress"]),
        # an all-traffic CIDR rule covering the VPC is still not a group reference
        (lambda g: [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "10.0.0.0/16"}]}], _self, ["ingress"]),
    ],
    ids=["no-self-egress", "no-self-ingress", "neither", "tcp-only", "cidr-rule"],
)
def test_efa_sg_self_reference_detects_missing_direction(builder, run_checks, ingress, egress, missing):
    sg = builder.security_group("efa")
    if ingress:
        builder.ec2.authorize_security_group_ingress(GroupId=sg, IpPermissions=ingress(sg))
    if egress:
        builder.ec2.authorize_security_group_egress(GroupId=sg, IpPermissions=egress(sg))
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)

    report = run_checks(["efa-sg-self-reference"])

    [finding] = report.findings_for("efa-sg-self-reference")
    assert finding.resource == sg
    assert finding.severity is Severity.CRITICAL
    assert finding.evidence["missing_directions"] == missing
    assert finding.evidence["instance_count"] == 2
    assert finding.evidence["efa_interfaces"] == 8
    assert [f["action"] for f in finding.evidence["fix"]] == [f"authorize-security-group-{d}" for d in missing]
    assert all(f["group_id"] == f["peer_group_id"] == sg and f["ip_protocol"] == "-1" for f in finding.evidence["fix"])
    assert report.exit_code == 2


def test_efa_sg_rule_on_a_second_group_shared_by_all_counts(builder, run_checks):
    """Rules may live on another group, as long as every EFA interface is in the group they reference."""
    shared = builder.security_group("cluster-shared")
    rules = builder.security_group("efa-rules")
    pair = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": shared}]}]
    builder.ec2.authorize_security_group_ingress(GroupId=rules, IpPermissions=pair)
    builder.ec2.authorize_security_group_egress(GroupId=rules, IpPermissions=pair)
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["cluster-shared", "efa-rules"], efa_interfaces=4)
    assert run_checks(["efa-sg-self-reference"]).findings == []


def test_efa_sg_reference_to_group_some_peers_lack_is_a_finding(builder, run_checks):
    a = builder.security_group("efa-a", self_ingress=True, self_egress=True)
    builder.security_group("efa-b", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa-a"], efa_interfaces=4)
    builder.launch(["gpu-2"], "p4d.24xlarge", "private-a", ["efa-b"], efa_interfaces=4)
    findings = run_checks(["efa-sg-self-reference"]).findings
    # Each group only admits itself; no group is shared, so gpu-1 and gpu-2 cannot exchange EFA traffic.
    assert sorted(f.evidence["missing_directions"] == ["ingress", "egress"] for f in findings) == [True, True]
    assert a in {f.resource for f in findings}


def test_efa_subnet_spread(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    stray = builder.launch(["gpu-3"], "p4d.24xlarge", "private-b", ["efa"], efa_interfaces=4)

    [finding] = run_checks(["efa-subnet-spread"]).findings
    assert finding.resource == builder.subnets["private-b"]
    assert finding.evidence["instances"] == stray
    assert finding.evidence["cluster_subnet"] == builder.subnets["private-a"]
    assert finding.evidence["availability_zone"] == "us-west-2b"
    assert "relaunch it in" in finding.summary


def test_efa_not_attached_and_missing_interfaces(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["head"], "c5n.18xlarge", "public-a", ["efa"], role="head")  # EFA-capable head: not flagged
    [bare] = builder.launch(["gpu-bare"], "p4d.24xlarge", "private-a", ["efa"])
    [thin] = builder.launch(["gpu-thin"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=8)
    builder.launch(["gpu-full"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32)

    report = run_checks(["efa-not-attached", "efa-missing-interfaces"])
    [not_attached] = report.findings_for("efa-not-attached")
    assert not_attached.resource == bare
    assert not_attached.evidence["max_efa_interfaces"] == 4
    [missing] = report.findings_for("efa-missing-interfaces")
    assert missing.resource == thin
    assert (missing.evidence["efa_interfaces"], missing.evidence["max_efa_interfaces"]) == (8, 32)
    assert missing.severity is Severity.WARNING


def test_cpu_only_cluster_skips_efa_checks(builder, run_checks):
    builder.security_group("plain")
    builder.launch(["web-1", "web-2"], "m5.large", "private-a", ["plain"])
    report = run_checks(EFA_IDS)
    assert report.findings == []
    assert {s.check for s in report.skipped} == set(EFA_IDS)
    # Nothing was verified, so the verdict is 'unknown', never a healthy 'ok'.
    assert report.status is Status.UNKNOWN


def test_placement_group_outliers_and_strategy(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.placement_group("pg", "spread")
    builder.launch(["gpu-1", "gpu-2", "gpu-3"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4,
                   placement_group="pg")
    [outside] = builder.launch(["gpu-4"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)

    findings = {f.resource: f for f in run_checks(["placement-group"]).findings}
    assert set(findings) == {outside, "pg"}
    assert findings[outside].evidence["cluster_placement_group"] == "pg"
    assert findings["pg"].evidence["strategy"] == "spread"


def test_placement_group_none_at_all(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    [finding] = run_checks(["placement-group"]).findings
    assert finding.resource == "cluster/test-cluster"
    assert finding.evidence["nodes_without_group"] == 2


def test_placement_strategy_lookup_failure_is_reported_not_assumed(healthy_efa_cluster, run_checks, monkeypatch):
    """moto upstream has no DescribePlacementGroups: the check must say what it could not verify."""
    from moto.ec2.responses import EC2Response

    def not_implemented(self):
        raise NotImplementedError("The describe_placement_groups action has not been implemented")

    monkeypatch.setattr(EC2Response, "describe_placement_groups", not_implemented)
    report = run_checks(["placement-group"])
    assert report.findings == []
    [error] = report.errors
    assert error.check == "placement-group"
    assert error.code == "NotImplemented"
    assert "strategy of placement group pg" in error.unverified
    assert report.status is Status.WARNING  # unverified, so not 'ok'
