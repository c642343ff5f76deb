"""The reachability engine's rule semantics over plain data: flow sets, ACL order, SG coverage, routing."""

from __future__ import annotations

from fmdoctor.engine.inventory import NetworkInterface, SecurityGroup, SgRule, Subnet
from fmdoctor.net import topology as t
from fmdoctor.net.analyze import analyze_endpoints
from fmdoctor.net.classes import evaluate_classes, interface_classes, islands
from fmdoctor.net.model import NACL_DENY, SG_INGRESS, Flow
from fmdoctor.net.nacl import evaluate_nacl, free_rule_number, nacl_fix
from fmdoctor.net.network import INTERNET, Network
from fmdoctor.net.routing import dead_target, lookup
from fmdoctor.net.security_groups import Peer, all_traffic_group_rule, evaluate_groups, first_admitting_rule
from fmdoctor.net.space import (
    FlowSet,
    address_range,
    cidr_range,
    cidrs_of,
    describe_services,
    service_ranges,
    split_services,
)

TCP22 = service_ranges("tcp", [(22, 22)])


def acl(*entries: tuple[int, bool, str, bool, str, int | None, int | None]) -> t.NetworkAcl:
    return t.NetworkAcl("acl-1", "vpc-1", False, tuple(t.NaclEntry(*e) for e in entries), ("subnet-a",))


def rule(rid: str, protocol: str = "tcp", lo: int | None = 22, hi: int | None = 22, egress: bool = False,
         **peer: str) -> SgRule:
    return SgRule(rid, "sg-1", egress, protocol, lo, hi, **peer)


# -- flow sets -----------------------------------------------------------------------------------------

def test_flow_set_subtraction_leaves_exactly_the_uncovered_part():
    flow = FlowSet.of([cidr_range("10.0.0.0/24")], service_ranges("tcp", [(1000, 1100)]))
    left = flow.minus(FlowSet.of([cidr_range("10.0.0.0/25")], service_ranges("tcp", [(0, 65535)])).parts)
    assert cidrs_of(left.addresses()) == ["10.0.0.128/25"]
    assert describe_services(left.services()) == "tcp/1000-1100"
    assert left.minus(FlowSet.of([cidr_range("0.0.0.0/0")], service_ranges("-1")).parts).empty


def test_service_axis_round_trips_protocols_and_ports():
    assert split_services(service_ranges("tcp", [(988, 988), (1018, 1023)])) == [("tcp", 988, 988),
                                                                                 ("tcp", 1018, 1023)]
    assert split_services(service_ranges("udp", [(53, 53)])) == [("udp", 53, 53)]
    assert split_services(service_ranges("icmp")) == [("icmp", None, None)]
    assert split_services(service_ranges("-1")) == [("-1", None, None)]
    everything_but_ssh = FlowSet.of([(0, 0)], service_ranges("-1")).minus(FlowSet.of([(0, 0)], TCP22).parts)
    assert split_services(everything_but_ssh.services()) == [("-1", None, None)]


# -- network ACLs ----------------------------------------------------------------------------------------

def test_nacl_deny_shadows_a_later_allow():
    table = acl((100, False, "6", False, "0.0.0.0/0", 22, 22), (200, False, "-1", True, "0.0.0.0/0", None, None))
    verdict = evaluate_nacl(table, False, FlowSet.of([address_range("203.0.113.7")], TCP22))
    assert not verdict.allowed and verdict.deciding.rule_number == 100
    assert verdict.deciding_rule() == "rule 100 inbound deny tcp/22 0.0.0.0/0"
    # Port 443 is not caught by the deny and the later allow admits it.
    assert evaluate_nacl(table, False, FlowSet.of([address_range("203.0.113.7")],
                                                  service_ranges("tcp", [(443, 443)]))).allowed


def test_nacl_allow_before_deny_wins_and_partial_deny_blocks():
    table = acl((90, False, "6", True, "10.0.0.0/25", 22, 22), (100, False, "6", False, "10.0.0.0/24", 22, 22),
                (200, False, "-1", True, "0.0.0.0/0", None, None))
    assert evaluate_nacl(table, False, FlowSet.of([cidr_range("10.0.0.0/25")], TCP22)).allowed
    verdict = evaluate_nacl(table, False, FlowSet.of([cidr_range("10.0.0.0/24")], TCP22))
    assert not verdict.allowed and cidrs_of(verdict.denied.addresses()) == ["10.0.0.128/25"]


def test_nacl_without_a_match_is_the_implicit_deny_and_its_fix_goes_after_the_last_rule():
    table = acl((100, True, "6", True, "0.0.0.0/0", 0, 1023))
    verdict = evaluate_nacl(table, True, FlowSet.of([address_range("10.0.16.4")],
                                                    service_ranges("tcp", [(1024, 65535)])))
    assert not verdict.allowed and verdict.deciding is None
    assert "rule *" in verdict.deciding_rule()
    [fix] = nacl_fix(verdict, ["10.0.16.0/20"])
    assert fix == {"action": "create-network-acl-entry", "network_acl_id": "acl-1", "rule_number": 110,
                   "egress": True, "protocol": "6", "from_port": 1024, "to_port": 65535, "cidr": "10.0.16.0/20",
                   "rule_action": "allow"}


def test_nacl_fix_is_numbered_below_the_deny_and_skips_used_numbers():
    table = acl((99, False, "6", True, "192.0.2.0/24", 80, 80), (100, False, "6", False, "0.0.0.0/0", 22, 22))
    verdict = evaluate_nacl(table, False, FlowSet.of([address_range("203.0.113.7")], TCP22))
    assert nacl_fix(verdict, ["203.0.113.0/24"])[0]["rule_number"] == 98
    assert free_rule_number(acl((1, False, "6", False, "0.0.0.0/0", 22, 22)), False, 1) is None


# -- security groups ---------------------------------------------------------------------------------------

def test_sg_referenced_group_rule_admits_members_only():
    group = SecurityGroup("sg-1", "db", "vpc-1", (rule("r1", referenced_group_id="sg-app"),))
    member = Peer(ip="10.0.0.4", group_ids=frozenset({"sg-app"}))
    stranger = Peer(ip="10.0.0.5", group_ids=frozenset({"sg-other"}))
    assert first_admitting_rule([group], False, "tcp", 22, member).id == "r1"
    assert first_admitting_rule([group], False, "tcp", 22, stranger) is None


def test_sg_coverage_adds_up_rules_and_reports_what_is_missing():
    group = SecurityGroup("sg-1", "fsx", "vpc-1", (rule("r1", lo=988, hi=988, cidr_ipv4="10.0.0.0/16"),
                                                    rule("r2", lo=1018, hi=1020, cidr_ipv4="10.0.0.0/16")))
    peer = Peer(ranges=(address_range("10.0.3.3"),))
    flow = FlowSet.of(peer.addresses, service_ranges("tcp", [(988, 988), (1018, 1023)]))
    verdict = evaluate_groups([group], False, flow, peer)
    assert [r.id for r in verdict.admitting] == ["r1", "r2"]
    assert describe_services(verdict.remaining.services()) == "tcp/1021-1023"


def test_sg_prefix_list_rule_uses_the_list_entries():
    group = SecurityGroup("sg-1", "head", "vpc-1", (rule("r1", prefix_list_id="pl-office"),))
    lists = {"pl-office": (cidr_range("203.0.113.0/24"),)}.get
    inside = Peer(ranges=(cidr_range("203.0.113.0/25"),))
    outside = Peer(ranges=(cidr_range("198.51.100.0/24"),))
    assert evaluate_groups([group], False, FlowSet.of(inside.addresses, TCP22), inside, lists).allowed
    assert not evaluate_groups([group], False, FlowSet.of(outside.addresses, TCP22), outside, lists).allowed
    # Entries unknown: not admitted, and the verdict says the list could not be read.
    unknown = evaluate_groups([group], False, FlowSet.of(inside.addresses, TCP22), inside)
    assert not unknown.allowed and unknown.unknown_prefix_lists == ("pl-office",)


def test_efa_rule_predicate_is_the_one_efa_sg_self_reference_uses():
    group = SecurityGroup("sg-efa", "efa", "vpc-1", (
        SgRule("r1", "sg-efa", False, "-1", referenced_group_id="sg-efa"),
        SgRule("r2", "sg-efa", True, "-1", cidr_ipv4="0.0.0.0/0"),
    ))
    assert all_traffic_group_rule([group], False, ["sg-efa"]).id == "r1"
    assert all_traffic_group_rule([group], True, ["sg-efa"]) is None  # a CIDR rule does not admit SRD


# -- routing -------------------------------------------------------------------------------------------------

def _table(*routes: t.Route) -> t.RouteTable:
    return t.RouteTable("rtb-1", "vpc-1", False, ("subnet-a",), (t.Route("10.0.0.0/16", t.LOCAL, "local"), *routes))


TOPOLOGY = t.Topology(
    region="us-west-2",
    vpc_ids=("vpc-1",),
    internet_gateways={"igw-1": t.InternetGateway("igw-1", ("vpc-1",))},
    nat_gateways={"nat-1": t.NatGateway("nat-1", "vpc-1", "subnet-p", "available"),
                  "nat-old": t.NatGateway("nat-old", "vpc-1", "subnet-p", "deleted")},
    vpc_endpoints={"vpce-1": t.VpcEndpoint("vpce-1", "vpc-1", "com.amazonaws.us-west-2.s3", "Gateway", "available")},
    prefix_lists={"pl-s3": t.PrefixList("pl-s3", "com.amazonaws.us-west-2.s3", ("52.216.0.0/15", "3.5.0.0/19"))},
)


def test_longest_prefix_match_splits_a_destination_range():
    table = _table(t.Route("0.0.0.0/0", t.NAT, "nat-1"), t.Route("198.51.100.0/24", t.IGW, "igw-1"),
                   t.Route("pl-s3", t.GATEWAY_ENDPOINT, "vpce-1"))
    [single] = lookup(TOPOLOGY, table, [address_range("198.51.100.7")])
    assert single.route.target_id == "igw-1"
    choices = {c.route.target_id: cidrs_of(c.ranges, 20) for c in lookup(TOPOLOGY, table, INTERNET)}
    assert choices["igw-1"] == ["198.51.100.0/24"]
    assert choices["vpce-1"] == ["3.5.0.0/19", "52.216.0.0/15"]
    assert "8.0.0.0/7" in choices["nat-1"] and "10.0.0.0/16" not in choices["nat-1"]


def test_no_route_and_blackholes():
    table = _table(t.Route("0.0.0.0/0", t.NAT, "nat-old"))
    [choice] = lookup(TOPOLOGY, _table(), [address_range("8.8.8.8")])
    assert choice.route is None
    [choice] = lookup(TOPOLOGY, table, [address_range("8.8.8.8")])
    assert dead_target(TOPOLOGY, choice.route, "vpc-1") == "NAT gateway nat-old is deleted"
    assert "blackhole" in dead_target(TOPOLOGY, t.Route("0.0.0.0/0", t.NAT, "nat-1", state="blackhole"), "vpc-1")
    assert "not attached" in dead_target(TOPOLOGY, t.Route("0.0.0.0/0", t.IGW, "igw-2"), "vpc-1")
    assert dead_target(TOPOLOGY, t.Route("0.0.0.0/0", t.NAT, "nat-1"), "vpc-1") is None


# -- classes -----------------------------------------------------------------------------------------------

def _eni(eni_id: str, ip: str, subnet: str = "subnet-a", groups: tuple[str, ...] = ("sg-db",),
         instance: str | None = None) -> NetworkInterface:
    return NetworkInterface(eni_id, subnet, "vpc-1", groups, (ip,), instance_id=instance or f"i-{eni_id[4:]}")


def test_a_class_is_split_where_a_cidr_rule_treats_its_members_differently():
    db = SecurityGroup("sg-db", "db", "vpc-1", (rule("r1", lo=5432, hi=5432, cidr_ipv4="10.0.0.4/32"),))
    app = SecurityGroup("sg-app", "app", "vpc-1", (SgRule("r2", "sg-app", True, "-1", cidr_ipv4="0.0.0.0/0"),))
    enis = [_eni("eni-a1", "10.0.0.4", groups=("sg-app",)), _eni("eni-a2", "10.0.0.5", groups=("sg-app",)),
            _eni("eni-d1", "10.0.0.9")]
    network = Network(topology=t.Topology(region="us-west-2"), interfaces={e.id: e for e in enis},
                      security_groups={"sg-db": db, "sg-app": app},
                      subnets={"subnet-a": Subnet("subnet-a", "vpc-1", "us-west-2a", "10.0.0.0/20")})
    [apps, dbs] = interface_classes(network, enis)
    assert apps.size == 2
    graph = evaluate_classes(network, [apps], [dbs], Flow("tcp", ((5432, 5432),)))
    outcomes = graph.edges[apps.key, dbs.key]["outcomes"]
    verdicts = {o.source.members[0].id: o.result.reachable for o in outcomes}
    assert verdicts == {"eni-a1": True, "eni-a2": False}
    blocked = next(o.result.blocked_by for o in outcomes if not o.result.reachable)
    assert blocked.code == SG_INGRESS and blocked.evidence["missing_addresses"] == ["10.0.0.5/32"]
    assert islands(graph) == [[apps.key], [dbs.key]]


def test_return_traffic_is_stateful_for_groups_and_stateless_for_acls():
    db = SecurityGroup("sg-db", "db", "vpc-1", (rule("r1", lo=5432, hi=5432, referenced_group_id="sg-app"),))
    app = SecurityGroup("sg-app", "app", "vpc-1", (SgRule("r2", "sg-app", True, "-1", cidr_ipv4="0.0.0.0/0"),))
    # No egress rule at all on the database's group: the reply still leaves (connection tracking).
    src, dst = _eni("eni-a", "10.0.0.4", "subnet-a", ("sg-app",)), _eni("eni-d", "10.0.16.4", "subnet-b")
    acls = {
        "acl-a": t.NetworkAcl("acl-a", "vpc-1", True, (t.NaclEntry(100, False, "-1", True, "0.0.0.0/0"),
                                                       t.NaclEntry(100, True, "-1", True, "0.0.0.0/0")), ("subnet-a",)),
        # Inbound 5432 allowed, outbound only to ports below 1024: the reply (to an ephemeral port) is dropped.
        "acl-b": t.NetworkAcl("acl-b", "vpc-1", False, (t.NaclEntry(100, False, "6", True, "10.0.0.0/16", 5432, 5432),
                                                        t.NaclEntry(100, True, "6", True, "10.0.0.0/16", 0, 1023)),
                              ("subnet-b",)),
    }
    local = (t.Route("10.0.0.0/16", t.LOCAL, "local"),)
    topology = t.Topology(region="us-west-2", vpc_ids=("vpc-1",), network_acls=acls,
                          route_tables={"rtb-1": t.RouteTable("rtb-1", "vpc-1", True, (), local)})
    network = Network(topology=topology, interfaces={src.id: src, dst.id: dst},
                      security_groups={"sg-db": db, "sg-app": app},
                      subnets={"subnet-a": Subnet("subnet-a", "vpc-1", "a", "10.0.0.0/20"),
                               "subnet-b": Subnet("subnet-b", "vpc-1", "a", "10.0.16.0/20")})
    result = analyze_endpoints(network, network.interface_endpoint(src), network.interface_endpoint(dst),
                               Flow("tcp", ((5432, 5432),)))
    assert result.reachable is False
    assert result.blocked_by.code == NACL_DENY and result.blocked_by.evidence["direction"] == "return"
    assert result.blocked_by.resource == "acl-b"
    stateful = [h for h in result.hops if h.component == "sg-state"]
    assert stateful and stateful[0].verdict == "pass"
    assert result.blocked_by.fix[0]["from_port"] == 1024 and result.blocked_by.fix[0]["egress"] is True


def test_internet_means_public_addresses_only():
    def public(ip: str) -> bool:
        return any(lo <= address_range(ip)[0] <= hi for lo, hi in INTERNET)

    assert public("8.8.8.8") and public("203.0.113.9") and public("52.216.1.1")
    assert not any(public(ip) for ip in ("10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254"))


# -- replies per kind of client (fmdoctor.net.replies) ---------------------------------------------------------

def _reply_acl(*entries: tuple[int, str, int | None, int | None]) -> t.NetworkAcl:
    """Outbound entries (number, cidr, from, to) for TCP, as a subnet's ACL sees replies it sends."""
    return t.NetworkAcl("acl-r", "vpc-1", False, tuple(t.NaclEntry(n, True, "6", True, c, lo, hi)
                                                      for n, c, lo, hi in entries), ("subnet-a",))


def test_reply_judgement_names_the_clients_a_narrow_range_fails():
    from fmdoctor.net import replies

    peer = (cidr_range("203.0.113.0/24"),)
    linux_and_windows = replies.judge(_reply_acl((100, "0.0.0.0/0", 32768, 65535)), True, peer, "tcp",
                                      replies.COMMON_CLIENTS)
    assert linux_and_windows.admitted == (replies.LINUX, replies.WINDOWS)
    assert [c for c, _ in linux_and_windows.failing] == [replies.NAT_GATEWAY]
    assert linux_and_windows.dropped_ports == ((1024, 32767),) and linux_and_windows.blocked_addresses == ()
    everyone = replies.judge(_reply_acl((100, "0.0.0.0/0", 1024, 65535)), True, peer, "tcp", replies.COMMON_CLIENTS)
    assert everyone.failing == () and everyone.blocked_addresses == ()
    nobody = replies.judge(_reply_acl((100, "0.0.0.0/0", 443, 443)), True, peer, "tcp", replies.COMMON_CLIENTS)
    assert nobody.admitted == () and nobody.blocked_addresses == peer


def test_reply_judgement_blocks_only_the_addresses_no_client_gets_a_reply_to():
    from fmdoctor.net import replies

    peer = (cidr_range("10.0.0.0/23"),)
    half = replies.judge(_reply_acl((100, "10.0.0.0/24", 1024, 65535)), True, peer, "tcp", (replies.LINUX,))
    assert cidrs_of(half.blocked_addresses) == ["10.0.1.0/24"]  # that part is blocked; the class splits there
    lustre = replies.judge(_reply_acl((100, "10.0.0.0/16", 1018, 1023)), True, peer, "tcp", (replies.LUSTRE,))
    assert lustre.failing == () and lustre.blocked_addresses == ()


# -- EFA pairs (fmdoctor.net.efa) ---------------------------------------------------------------------------------

def test_efa_boundary_compares_zone_ids_and_vpcs():
    from fmdoctor.net import efa

    subnets = {
        "a1": Subnet("a1", "vpc-1", "us-west-2a", "10.0.0.0/20", "usw2-az2"),
        "a2": Subnet("a2", "vpc-1", "us-west-2a", "10.0.16.0/20", "usw2-az2"),
        "b": Subnet("b", "vpc-1", "us-west-2b", "10.0.32.0/20", "usw2-az1"),
        "other": Subnet("other", "vpc-2", "us-west-2a", "10.1.0.0/20", "usw2-az2"),
        # Another account's name for the same zone: the id decides.
        "shared": Subnet("shared", "vpc-1", "us-west-2c", "10.0.48.0/20", "usw2-az2"),
    }
    assert efa.boundary(subnets, "a1", "a2") == efa.SAME
    assert efa.boundary(subnets, "a1", "shared") == efa.SAME
    assert efa.boundary(subnets, "a1", "b") == efa.CROSS_ZONE
    assert efa.boundary(subnets, "a1", "other") == efa.CROSS_VPC
    assert efa.boundary(subnets, "a1", "gone") == efa.UNKNOWN


def test_efa_pairs_admit_groups_that_reference_each_other():
    from fmdoctor.net import efa

    def group(gid: str, peer: str) -> SecurityGroup:
        return SecurityGroup(gid, gid, "vpc-1", tuple(SgRule(f"{gid}-{d}", gid, d == "out", "-1", referenced_group_id=p)
                                                      for p in (gid, peer) for d in ("in", "out")))

    groups = {"sg-a": group("sg-a", "sg-b"), "sg-b": group("sg-b", "sg-a")}
    subnets = {"subnet-a": Subnet("subnet-a", "vpc-1", "us-west-2a", "10.0.0.0/20", "usw2-az2")}
    enis = [NetworkInterface(f"eni-{g}{n}", "subnet-a", "vpc-1", (f"sg-{g}",), interface_type="efa-only",
                             instance_id=f"i-{g}{n}") for g in "ab" for n in (1, 2)]
    network = Network(topology=t.Topology(region="us-west-2"), interfaces={e.id: e for e in enis},
                      security_groups=groups, subnets=subnets)
    classes = interface_classes(network, enis, by_public_ip=False)
    pairs = efa.efa_pairs(groups, subnets, classes)
    assert len(pairs) == 4 and all(p.admitted for p in pairs)  # a-a, a-b, b-a, b-b
    lonely = {"sg-a": group("sg-a", "sg-a"), "sg-b": group("sg-b", "sg-b")}
    blocked = [p for p in efa.efa_pairs(lonely, subnets, classes) if not p.admitted]
    assert {(p.source.key[1], p.destination.key[1]) for p in blocked} == {(("sg-a",), ("sg-b",)),
                                                                         (("sg-b",), ("sg-a",))}
    assert efa.fix_action(("sg-b",), ("sg-a",), egress=True) == {
        "action": "authorize-security-group-egress", "group_id": "sg-b", "ip_protocol": "-1", "peer_group_id": "sg-a"}
