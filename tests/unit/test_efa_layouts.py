"""EFA verdicts on clusters laid out the way AWS, ParallelCluster and EKS build them today (moto).

Each layout has a healthy form and its broken counterpart. The rules: the EC2 EFA guide's limitations
("EFA traffic can't cross Availability Zones or VPCs"), its security-group requirement (create-efa.html), the EKS
guide on accelerated instances (node-efa.adoc) and DescribeInstanceTypes' facts as moto serves them (moto's
instance-type catalogue is generated from real DescribeInstanceTypes responses: p6-b300's card 0 is a 350 Gbps
card without EFA, cards 1-16 are 400 Gbps EFA cards).
"""

from __future__ import annotations

import pytest

from fmdoctor.demo.builders import ClusterBuilder
from fmdoctor.demo.metrics import describe_nodes
from fmdoctor.engine.model import Severity, Status

REGION = "us-west-2"
EFA_GROUP_CHECKS = ["efa-sg-self-reference", "efa-peer-unreachable"]


def all_traffic(group: str) -> list[dict]:
    return [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}]


def admit_each_other(b: ClusterBuilder, first: str, second: str, egress: bool = True, ingress: bool = True) -> None:
    """All-traffic rules from ``first`` to ``second``: egress on first, ingress on second."""
    if egress:
        b.ec2.authorize_security_group_egress(GroupId=b.groups[first], IpPermissions=all_traffic(b.groups[second]))
    if ingress:
        b.ec2.authorize_security_group_ingress(GroupId=b.groups[second], IpPermissions=all_traffic(b.groups[first]))


@pytest.fixture
def same_zone(builder: ClusterBuilder) -> ClusterBuilder:
    """A second private subnet in us-west-2a, next to private-a (IP space ran out, as it does)."""
    builder.subnet("private-a2", "10.0.32.0/20", f"{REGION}a")
    return builder


# -- several subnets, zones and VPCs ----------------------------------------------------------------------

def test_several_subnets_in_one_zone_are_healthy(same_zone, run_checks):
    same_zone.security_group("efa", self_ingress=True, self_egress=True)
    same_zone.placement_group("pg")
    same_zone.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32, placement_group="pg")
    same_zone.launch(["gpu-3"], "p5.48xlarge", "private-a2", ["efa"], efa_interfaces=32, placement_group="pg")
    report = run_checks(["efa-subnet-spread", *EFA_GROUP_CHECKS, "placement-group"])
    assert report.findings == [] and report.errors == [] and report.status is Status.OK


def test_a_second_zone_is_critical_and_says_so(same_zone, run_checks):
    same_zone.security_group("efa", self_ingress=True, self_egress=True)
    same_zone.launch(["gpu-1"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32)
    same_zone.launch(["gpu-2"], "p5.48xlarge", "private-a2", ["efa"], efa_interfaces=32)
    [stray] = same_zone.launch(["gpu-3"], "p5.48xlarge", "private-b", ["efa"], efa_interfaces=32)
    [finding] = run_checks(["efa-subnet-spread"]).findings
    ev = finding.evidence
    assert finding.severity is Severity.CRITICAL and finding.resource == same_zone.subnets["private-b"]
    assert ev["crosses"] == "availability-zone" and ev["instances"] == [stray]
    assert ev["cluster_subnets"] == sorted([same_zone.subnets["private-a"], same_zone.subnets["private-a2"]])
    assert ev["availability_zone"] == f"{REGION}b" and ev["availability_zone_id"]
    assert "can't cross Availability Zones or VPCs" in finding.summary


def test_a_second_vpc_is_critical_even_in_the_same_zone(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)
    other = ClusterBuilder(builder.ec2, builder.cluster)
    other.vpc("10.9.0.0/16")
    other.subnet("other-a", "10.9.0.0/20", f"{REGION}a")
    other.security_group("efa", self_ingress=True, self_egress=True)
    [stray] = other.launch(["gpu-3"], "p4d.24xlarge", "other-a", ["efa"], efa_interfaces=4)
    report = run_checks(["efa-subnet-spread", *EFA_GROUP_CHECKS])
    [finding] = report.findings
    assert finding.check == "efa-subnet-spread" and finding.evidence["crosses"] == "vpc"
    assert finding.evidence["instances"] == [stray] and finding.evidence["vpc"] == other.vpc_id


def test_why_not_efa_between_subnets_of_one_zone_passes_and_across_zones_blocks(same_zone, run_checks):
    from fmdoctor.config import Settings
    from fmdoctor.engine.api import Connection, Doctor
    from fmdoctor.net.model import EFA_CROSS_SUBNET
    from fmdoctor.net.reachability import why_not

    same_zone.security_group("efa", self_ingress=True, self_egress=True)
    same_zone.launch(["gpu-1"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=2, efa_only=True)
    same_zone.launch(["gpu-2"], "p5.48xlarge", "private-a2", ["efa"], efa_interfaces=2, efa_only=True)
    same_zone.launch(["gpu-3"], "p5.48xlarge", "private-b", ["efa"], efa_interfaces=2, efa_only=True)
    doctor = Doctor(settings=Settings.model_validate({"clusters": {"test-cluster": {}}}),
                    connection=Connection(region=REGION))
    across = why_not(doctor, "test-cluster", "gpu-1", "gpu-2", protocol="efa")
    assert across.reachable is True and across.warnings == ()
    assert [h.component for h in across.hops] == ["eni", "efa-zone", "sg-egress", "route", "sg-ingress", "destination"]
    blocked = why_not(doctor, "test-cluster", "gpu-1", "gpu-3", protocol="efa").blocked_by
    assert blocked.code == EFA_CROSS_SUBNET and blocked.evidence["crosses"] == "availability-zone"
    assert "can't cross Availability Zones or VPCs" in blocked.summary


# -- security groups per node group ------------------------------------------------------------------------

def node_groups(b: ClusterBuilder, *, cross: str) -> dict[str, list[str]]:
    """Two EKS node groups, each with its own self-referencing EFA group, in two subnets of one zone;
    ``cross``: 'both' (all-traffic rules each way), 'one-way' (a -> b only), 'none'."""
    b.subnet("private-a2", "10.0.32.0/20", f"{REGION}a")
    b.security_group("efa-ng-a", self_ingress=True, self_egress=True)
    b.security_group("efa-ng-b", self_ingress=True, self_egress=True)
    if cross in ("both", "one-way"):
        admit_each_other(b, "efa-ng-a", "efa-ng-b")
    if cross == "both":
        admit_each_other(b, "efa-ng-b", "efa-ng-a")
    return {
        "a": b.launch(["a-1", "a-2"], "p5.48xlarge", "private-a", ["efa-ng-a"], efa_interfaces=32, efa_only=True,
                      extra_tags={"eks:nodegroup-name": "gpu-a"}),
        "b": b.launch(["b-1"], "p5.48xlarge", "private-a2", ["efa-ng-b"], efa_interfaces=32, efa_only=True,
                      extra_tags={"eks:nodegroup-name": "gpu-b"}),
    }


def test_node_groups_whose_groups_admit_each_other_are_healthy(builder, run_checks):
    node_groups(builder, cross="both")
    report = run_checks(EFA_GROUP_CHECKS + ["efa-subnet-spread"])
    assert report.findings == [] and report.errors == []


def test_a_one_way_reference_names_the_missing_rules_without_duplicating_a_self_rule(builder, run_checks):
    nodes = node_groups(builder, cross="one-way")
    a, b = builder.groups["efa-ng-a"], builder.groups["efa-ng-b"]
    report = run_checks(EFA_GROUP_CHECKS)
    by_group = {f.resource: f for f in report.findings_for("efa-sg-self-reference")}
    # a -> b is admitted; b -> a needs b's egress to a and a's ingress from b. The fix adds exactly those,
    # referencing the peer's group, never a self rule the group already has.
    assert set(by_group) == {a, b}
    assert by_group[b].evidence["missing_directions"] == ["egress"]
    assert by_group[a].evidence["missing_directions"] == ["ingress"]
    assert by_group[b].evidence["fix"] == [{"action": "authorize-security-group-egress", "group_id": b,
                                            "ip_protocol": "-1", "peer_group_id": a}]
    assert by_group[a].evidence["fix"] == [{"action": "authorize-security-group-ingress", "group_id": a,
                                            "ip_protocol": "-1", "peer_group_id": b}]
    assert by_group[b].evidence["instances"] == nodes["b"] and sorted(by_group[a].evidence["instances"]) == sorted(
        nodes["a"])
    peer = report.findings_for("efa-peer-unreachable")
    assert {f.resource for f in peer} == {b}  # the first blocker on b -> a is b's egress
    assert peer[0].evidence["code"] == "sg-egress-no-match" and peer[0].evidence["node_count"] == 3


# -- the two group checks never disagree ------------------------------------------------------------------------

def _self_only(b: ClusterBuilder) -> None:
    b.security_group("efa", self_ingress=True)  # no egress self rule: the demo's fault
    b.launch(["n-1", "n-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)


def _tcp_only(b: ClusterBuilder) -> None:
    group = b.security_group("efa", self_egress=True)
    b.ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 0, "ToPort": 65535, "UserIdGroupPairs": [{"GroupId": group}]}])
    b.launch(["n-1", "n-2"], "p4d.24xlarge", "private-a", ["efa"], efa_interfaces=4)


def _shared_rules_group(b: ClusterBuilder) -> None:
    shared = b.security_group("cluster-shared")
    b.security_group("efa-rules")
    admit_each_other(b, "efa-rules", "cluster-shared", ingress=False)
    b.ec2.authorize_security_group_ingress(GroupId=b.groups["efa-rules"], IpPermissions=all_traffic(shared))
    b.launch(["n-1", "n-2"], "p4d.24xlarge", "private-a", ["cluster-shared", "efa-rules"], efa_interfaces=4)


def _one_node_per_subnet(b: ClusterBuilder) -> None:
    b.subnet("private-a2", "10.0.32.0/20", f"{REGION}a")
    b.security_group("efa", self_ingress=True, self_egress=True)
    b.launch(["n-1"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32)
    b.launch(["n-2"], "p5.48xlarge", "private-a2", ["efa"], efa_interfaces=32)


LAYOUTS = {
    "node-groups-both-ways": lambda b: node_groups(b, cross="both"),
    "node-groups-one-way": lambda b: node_groups(b, cross="one-way"),
    "node-groups-isolated": lambda b: node_groups(b, cross="none"),
    "self-ingress-only": _self_only,
    "tcp-only-rule": _tcp_only,
    "rules-on-a-second-group": _shared_rules_group,
    "one-node-per-subnet": _one_node_per_subnet,
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_efa_sg_self_reference_and_efa_peer_unreachable_never_contradict(builder, run_checks, layout):
    LAYOUTS[layout](builder)
    report = run_checks(EFA_GROUP_CHECKS)
    by_group = report.findings_for("efa-sg-self-reference")
    by_pair = report.findings_for("efa-peer-unreachable")
    assert bool(by_group) == bool(by_pair), (by_group, by_pair)
    # Every group the pair check blames is one the rule check says lacks a rule, and the nodes agree.
    assert {f.resource for f in by_pair} <= {f.resource for f in by_group}
    pair_nodes = {label.rsplit("(", 1)[1].rstrip(")") for f in by_pair for label in f.evidence["nodes"]}
    group_nodes = {i for f in by_group for i in f.evidence["instances"]}
    assert pair_nodes <= group_nodes
    assert report.errors == []


# -- which nodes need EFA ------------------------------------------------------------------------------------

def test_cpu_nodes_of_efa_capable_types_are_at_most_info(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32)
    cpu = builder.launch(["prep-1", "prep-2"], "c6i.32xlarge", "private-a", ["efa"])
    report = run_checks(["efa-not-attached"])
    [finding] = report.findings
    assert finding.severity is Severity.INFO and finding.resource == "c6i.32xlarge"
    assert sorted(finding.evidence["instances"]) == sorted(cpu)
    assert report.status is Status.OK


def test_a_cpu_node_of_a_node_group_that_uses_efa_is_critical(builder, run_checks):
    """An HPC queue (hpc7a, no GPUs) runs MPI over EFA: its node without EFA is as broken as a GPU node."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    queue = {"parallelcluster:queue-name": "hpc", "parallelcluster:compute-resource-name": "hpc7a"}
    builder.launch(["hpc-1"], "hpc7a.96xlarge", "private-a", ["efa"], efa_interfaces=2, extra_tags=queue)
    [bare] = builder.launch(["hpc-2"], "hpc7a.96xlarge", "private-a", ["efa"], extra_tags=queue)
    [finding] = run_checks(["efa-not-attached"]).findings
    assert finding.resource == bare and finding.severity is Severity.CRITICAL
    assert finding.evidence["expected_because"] == "node-group"
    assert finding.evidence["node_group"] == "parallelcluster:hpc/hpc7a"


# -- EFA interface counts and bandwidth --------------------------------------------------------------------------

def test_efa_only_interfaces_count_and_a_full_node_is_healthy(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1", "gpu-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32, efa_only=True)
    report = run_checks(["efa-not-attached", "efa-missing-interfaces", *EFA_GROUP_CHECKS])
    assert report.findings == [] and report.errors == []


def test_bandwidth_share_uses_each_cards_own_speed(builder, run_checks):
    """p6-b300: card 0 (350 Gbps) takes no EFA; 16 cards of 400 Gbps do. 8 EFA interfaces are half, not 8/17."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["full"], "p6-b300.48xlarge", "private-a", ["efa"], efa_interfaces=16, first_efa_card=1,
                   efa_only=True)
    [half] = builder.launch(["half"], "p6-b300.48xlarge", "private-a", ["efa"], efa_interfaces=8, first_efa_card=1,
                            efa_only=True)
    [finding] = run_checks(["efa-missing-interfaces"]).findings
    ev = finding.evidence
    assert finding.resource == half
    assert (ev["efa_interfaces"], ev["max_efa_interfaces"]) == (8, 16)
    assert (ev["efa_bandwidth_gbps"], ev["max_efa_bandwidth_gbps"], ev["bandwidth_share"]) == (3200.0, 6400.0, 0.5)
    assert ev["efa_cards"] == list(range(1, 17)) and ev["share_by"] == "card bandwidth"
    assert "3200 of 6400 Gbps" in finding.summary


def test_a_type_the_region_does_not_know_is_reported_not_skipped(builder, run_checks):
    """moto, like a region without it, answers InvalidInstanceType for p6e-gb200.36xlarge: that type is not
    judged and says so, and the other types of the same DescribeInstanceTypes batch still are."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gb-1"], "p6e-gb200.36xlarge", "private-a", ["efa"], efa_interfaces=4)
    [thin] = builder.launch(["p5-thin"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=4)
    report = run_checks(["efa-missing-interfaces", "efa-not-attached"])
    assert [f.resource for f in report.findings_for("efa-missing-interfaces")] == [thin]
    errors = {(e.check, e.code) for e in report.errors}
    assert errors == {("efa-missing-interfaces", "InstanceTypeUnknown"), ("efa-not-attached", "InstanceTypeUnknown")}
    assert all("p6e-gb200.36xlarge" in e.unverified for e in report.errors)
    assert report.status is Status.WARNING


def test_only_unknown_types_means_nothing_was_verified(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gb-1", "gb-2"], "p6e-gb200.36xlarge", "private-a", ["efa"], efa_interfaces=4)
    report = run_checks(["efa-missing-interfaces", "efa-not-attached"])
    assert report.findings == [] and report.skipped == [] and report.status is Status.UNKNOWN
    assert {(e.check, e.code) for e in report.errors} >= {("efa-missing-interfaces", "InstanceTypeUnknown"),
                                                          ("efa-not-attached", "InstanceTypeUnknown")}


# -- placement ------------------------------------------------------------------------------------------------

def test_capacity_block_nodes_need_no_placement_group(builder, run_checks):
    """Capacity Blocks place their instances in UltraClusters (API_CapacityBlock): no placement-group warning."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    nodes = builder.launch(["cb-1", "cb-2", "cb-3"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32,
                           capacity_block="cr-0123456789abcdef0")
    raw = builder.ec2.describe_instances(InstanceIds=nodes)["Reservations"][0]["Instances"][0]
    assert raw["InstanceLifecycle"] == "capacity-block"  # as EC2 reports an instance of a Capacity Block
    report = run_checks(["placement-group"])
    assert report.findings == []
    assert "Capacity Blocks" in report.skipped[0].reason


def test_on_demand_nodes_beside_a_capacity_block_are_still_judged(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["cb-1", "cb-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32,
                   capacity_block="cr-0123456789abcdef0")
    builder.launch(["od-1", "od-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32)
    [finding] = run_checks(["placement-group"]).findings
    assert finding.resource == "cluster/test-cluster" and finding.evidence["nodes_without_group"] == 2


def test_one_cluster_placement_group_per_node_group_is_normal(builder, run_checks):
    builder.security_group("efa", self_ingress=True, self_egress=True)
    for queue in ("train", "eval"):
        builder.placement_group(f"pg-{queue}")
        builder.launch([f"{queue}-1", f"{queue}-2"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32,
                       placement_group=f"pg-{queue}", extra_tags={"eks:nodegroup-name": queue})
    assert run_checks(["placement-group"]).findings == []
    # A node of 'train' launched outside its group's placement group is still an outlier.
    [stray] = builder.launch(["train-3"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32,
                             placement_group="pg-eval", extra_tags={"eks:nodegroup-name": "train"})
    [finding] = run_checks(["placement-group"]).findings
    assert finding.resource == stray
    assert finding.evidence["cluster_placement_group"] == "pg-train"
    assert finding.evidence["node_group"] == "eks:nodegroup-name=train"


def test_a_launch_records_the_interfaces_describe_instances_reports(builder):
    """The demo's seeders take a node's IP and interfaces from its RunInstances answer instead of describing it
    again; for every layout they launch, the two answers must agree."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["head"], "m5.8xlarge", "public-a", ["efa"], public_ip=True)
    builder.launch(["p5"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32)
    builder.launch(["p5-efa-only"], "p5.48xlarge", "private-a", ["efa"], efa_interfaces=32, efa_only=True)
    builder.launch(["b300"], "p6-b300.48xlarge", "private-b", ["efa"], efa_interfaces=16, first_efa_card=1)

    described = describe_nodes(builder.ec2, {instance_id: name for name, instance_id in builder.nodes.items()})

    assert described == [builder.launched[node.name] for node in described]
    assert len(described) == 4
    assert builder.launched["head"].efa == (False,)
    assert builder.launched["p5-efa-only"].efa == (True,) * 32
    assert builder.launched["b300"].efa == (False,) + (True,) * 16
