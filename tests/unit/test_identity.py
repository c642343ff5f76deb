"""The node-identity resolver: one small case per name form and per branch (exact, host:port, hyperpod-, an
instance id inside a longer name, ip-a-b-c-d under another domain, first label, foreign, loopback, ambiguous,
close names, aliases, HyperPod nodes).

Name shapes follow their sources: EC2 private DNS names (``ip-10-0-1-12.us-west-2.compute.internal``, and
``ec2.internal`` in us-east-1: EC2 instance hostname types), EKS node names (the private DNS name), HyperPod
EKS node names ``hyperpod-<InstanceId>`` and ListClusterNodes' NodeLogicalId, ParallelCluster's Slurm node names
``{queue}-{st|dy}-{compute resource}-{n}`` (aws-parallelcluster-node slurm_plugin), its log streams
``<hostname>.<instance id>.<log>``, DCGM exporter's ``Hostname`` and Prometheus's ``instance`` (``host:port``).
"""

from __future__ import annotations

import pytest

from fmdoctor.engine.errors import AwsCallFailed, AwsFailure
from fmdoctor.engine.hyperpod import HyperPodNode
from fmdoctor.engine.identity import NodeIdentities
from fmdoctor.engine.inventory import Instance, Inventory, NetworkInterface, UnavailablePart

A, B, C = "i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2", "i-0ccccccccccccccc3"


def _inventory(**extra: object) -> Inventory:
    nodes = (
        Instance(A, "p5.48xlarge", "running", "subnet-1", "vpc-1", "us-west-2a", private_ip="10.0.1.12",
                 private_dns="ip-10-0-1-12.us-west-2.compute.internal",
                 tags={"Name": "gpu-node-1", "slurm:hostname": "queue1-st-p5-1"},
                 interface_ids=("eni-0aaaaaaaaaaaaaaa1", "eni-0aaaaaaaaaaaaaaa2")),
        Instance(B, "p5.48xlarge", "running", "subnet-1", "vpc-1", "us-west-2a", private_ip="10.0.1.13",
                 public_ip="54.1.2.3", private_dns="ip-10-0-1-13.us-west-2.compute.internal",
                 tags={"Name": "gpu-node-2"}, interface_ids=("eni-0bbbbbbbbbbbbbbb1",)),
        # resource-based naming: the hostname is the instance id; no Name tag
        Instance(C, "p5.48xlarge", "running", "subnet-1", "vpc-1", "us-west-2a", private_ip="10.0.1.14",
                 private_dns=f"{C}.us-west-2.compute.internal"),
    )
    interfaces = {
        "eni-0aaaaaaaaaaaaaaa1": NetworkInterface("eni-0aaaaaaaaaaaaaaa1", "subnet-1", "vpc-1", ("sg-1",),
                                                  ("10.0.1.12", "10.0.1.40"), instance_id=A,
                                                  ipv6_ips=("2600:1f14:0:1::12",)),
        "eni-0aaaaaaaaaaaaaaa2": NetworkInterface("eni-0aaaaaaaaaaaaaaa2", "subnet-1", "vpc-1", ("sg-1",),
                                                  ("10.0.2.12",), interface_type="efa", instance_id=A),
        "eni-0bbbbbbbbbbbbbbb1": NetworkInterface("eni-0bbbbbbbbbbbbbbb1", "subnet-1", "vpc-1", ("sg-1",),
                                                  ("10.0.1.13",), instance_id=B),
    }
    return Inventory("c", "us-west-2", nodes, extra.pop("interfaces", interfaces), **extra)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ids() -> NodeIdentities:
    return NodeIdentities.of(_inventory(), hostname_tags=("slurm:hostname",))


@pytest.mark.parametrize("name, node, via", [
    (A, A, "instance-id"),
    ("  " + A.upper() + " ", A, "instance-id"),  # case and whitespace
    ("gpu-node-2", B, "name-tag"),
    ("ip-10-0-1-12.us-west-2.compute.internal", A, "private-dns"),  # full; also the EKS node name
    ("ip-10-0-1-12", A, "short-dns"),
    ("ip-10-0-1-12.ec2.internal", A, "short-dns"),  # another domain (us-east-1's): the address decides
    ("IP-10-0-1-12.cluster.local", A, "short-dns"),
    ("10.0.1.12", A, "ipv4"),
    ("10.0.1.40", A, "ipv4"),  # a secondary address (a VPC CNI pod IP)
    ("10.0.2.12", A, "ipv4"),  # the EFA interface's address
    ("2600:1f14:0:1::12", A, "ipv6"),
    ("2600:1f14:0000:0001:0000:0000:0000:0012", A, "ipv6"),  # any spelling of the same address
    ("eni-0aaaaaaaaaaaaaaa2", A, "interface-id"),
    ("54.1.2.3", B, "public-ip"),
    ("queue1-st-p5-1", A, "hostname-tag"),  # a Slurm node name carried by a configured tag
    ("queue1-st-p5-1.c.pcluster", A, "hostname-tag"),  # under ParallelCluster's DNS domain: first label
    (f"hyperpod-{A}", A, "hyperpod-node"),  # HyperPod EKS node name
    ("10.0.1.12:9400", A, "dcgm-instance"),  # Prometheus instance label of a DCGM exporter
    ("10.0.1.40:9400", A, "dcgm-instance"),  # scraped at a pod IP, a secondary address
    ("[2600:1f14:0:1::12]:9400", A, "dcgm-instance"),
    ("ip-10-0-1-13.us-west-2.compute.internal:9400", B, "dcgm-instance"),
    (f"ip-10-0-1-12.{A}.slurmd", A, "log-stream"),  # ParallelCluster log stream
    (f"{C}.us-west-2.compute.internal", C, "private-dns"),  # resource-based name
    (f"{C}.ec2.internal", C, "instance-id"),
])
def test_every_name_form_resolves(ids: NodeIdentities, name: str, node: str, via: str) -> None:
    match = ids.resolve(name)
    assert match.instance is not None and match.instance.id == node, match
    assert (match.via, match.candidates, match.ambiguous, match.foreign) == (via, (match.instance,), False, False)


@pytest.mark.parametrize("name, via, foreign", [
    ("i-0dddddddddddddddd", "instance-id", True),
    ("10.9.9.9", "ipv4", True),
    ("ip-10-9-9-9.ec2.internal", "short-dns", True),
    ("2600:1f14::99", "ipv6", True),
    ("hyperpod-i-0dddddddddddddddd", "hyperpod-node", True),
    ("10.9.9.9:9400", "dcgm-instance", True),
    # a stream naming another instance is that instance's, whatever its host part says
    ("ip-10-0-1-12.i-0dddddddddddddddd.slurmd", "log-stream", True),
    ("localhost", "loopback", False),
    ("127.0.0.1:9400", "loopback", False),
    ("", "", False),
    ("x" * 600, "", False),
])
def test_names_of_no_node_of_ours(ids: NodeIdentities, name: str, via: str, foreign: bool) -> None:
    match = ids.resolve(name)
    assert (match.instance, match.candidates, match.via, match.foreign) == (None, (), via, foreign)


def test_unknown_name_comes_back_with_close_names(ids: NodeIdentities) -> None:
    match = ids.resolve("gpu-node-9")
    assert match.instance is None and not match.foreign
    assert "gpu-node-1" in match.close and "gpu-node-9" in match.describe()


def test_a_name_two_nodes_share_is_ambiguous() -> None:
    inventory = _inventory()
    twins = tuple(i if i.id != B else Instance(**{**i.__dict__, "tags": {"Name": "gpu-node-1"}})
                  for i in inventory.instances)
    ids = NodeIdentities.of(Inventory("c", "us-west-2", twins, inventory.interfaces))
    match = ids.resolve("gpu-node-1")
    assert match.instance is None and match.ambiguous and match.via == "name-tag"
    assert {i.id for i in match.candidates} == {A, B} and A in match.describe()


def test_built_once_per_inventory_and_tags() -> None:
    inventory = _inventory()
    assert NodeIdentities.of(inventory) is NodeIdentities.of(inventory)
    assert NodeIdentities.of(inventory) is not NodeIdentities.of(inventory, ("slurm:hostname",))
    assert NodeIdentities.of(inventory).resolve("queue1-st-p5-1").instance is None  # the tag not configured


def test_names_and_label(ids: NodeIdentities) -> None:
    assert ids.names(A)[:5] == ("gpu-node-1", A, "queue1-st-p5-1", "ip-10-0-1-12.us-west-2.compute.internal",
                                "ip-10-0-1-12")
    assert ids.label(A) == f"gpu-node-1 ({A})"
    assert ids.label(C) == f"{C}.us-west-2.compute.internal ({C})"  # no Name tag: the DNS name people see
    assert ids.label("i-0notours00000000") == "i-0notours00000000"


def test_aliases_map_through_any_known_name(ids: NodeIdentities) -> None:
    slurm = ids.with_aliases({"p5-dy-gpu-7": "10.0.1.13", "p5-dy-gpu-8": A, "lost-1": "10.9.9.9"}, via="slurm-node")
    assert slurm.resolve("p5-dy-gpu-7").instance == ids.nodes[B]
    assert slurm.resolve("p5-dy-gpu-8").via == "slurm-node"
    assert slurm.resolve("lost-1").instance is None and slurm.skipped == ("lost-1",)
    assert "p5-dy-gpu-7" in slurm.names(B)
    assert ids.resolve("p5-dy-gpu-7").instance is None  # the original is unchanged


def test_an_alias_two_nodes_share_is_ambiguous(ids: NodeIdentities) -> None:
    both = ids.with_aliases({"trainer": A}, via="k8s-node").with_aliases({"trainer": B}, via="k8s-node")
    assert both.resolve("trainer").ambiguous


def test_hyperpod_nodes_by_every_name() -> None:
    node = HyperPodNode("i-0eeeeeeeeeeeeeee5", "workers", "ml.p5.48xlarge", "Running",
                        private_dns="ip-10-1-2-3.us-west-2.compute.internal")
    ids = NodeIdentities.of(_inventory()).with_hyperpod_nodes([node], {node.node_id: "workers-lid-1"})
    for name, via in ((node.node_id, "instance-id"), (f"hyperpod-{node.node_id}", "hyperpod-node"),
                      ("workers-lid-1", "hyperpod-node"), ("ip-10-1-2-3", "short-dns"),
                      ("10.1.2.3:9400", "dcgm-instance")):
        match = ids.resolve(name)
        assert match.instance is not None and match.instance.id == node.node_id and match.via == via, name
    assert ids.resolve(A).instance is not None  # the EC2 nodes stay


def test_unreadable_interfaces_are_said_not_fatal() -> None:
    denied = AwsFailure("AccessDenied", "no", "ec2:DescribeNetworkInterfaces", "access-denied")
    part = UnavailablePart("network interfaces", denied)
    ids = NodeIdentities.of(_inventory(interfaces=part))
    assert ids.unreadable == ("network interfaces",)
    assert ids.resolve("ip-10-0-1-12").instance is not None  # the instance's own address still names it
    assert ids.resolve("eni-0aaaaaaaaaaaaaaa2").instance is None
    with pytest.raises(AwsCallFailed):
        part.items()


def test_nodes_known_only_by_names() -> None:
    """A data source's nodes without an inventory (HyperPod's, a fleet's metric identities)."""
    ids = NodeIdentities.of_names({
        A: ("10.0.1.12", "ip-10-0-1-12.us-west-2.compute.internal", "queue1-st-p5-1.c.pcluster"),
        B: ("10.0.1.13", f"hyperpod-{B}", "shared-name"),
        C: ("shared-name",),
    })
    for name, node, via in (("ip-10-0-1-12", A, "short-dns"), ("queue1-st-p5-1", A, "hostname-tag"),
                            (f"hyperpod-{B}", B, "hyperpod-node"), ("10.0.1.13:9400", B, "dcgm-instance")):
        match = ids.resolve(name)
        assert match.instance is not None and (match.instance.id, match.via) == (node, via), name
    assert ids.resolve("shared-name").ambiguous
    assert ids.resolve("10.0.1.99").foreign and not ids.resolve("some-host").foreign
    assert set(ids.every_name(A)) >= {A, "10.0.1.12", "ip-10-0-1-12", "queue1-st-p5-1"}


@pytest.mark.parametrize("name, form", [
    ("ip-10-0-1-12.us-west-2.compute.internal", "ip-10-0-1-12"),
    ("IP-10-0-1-12.ec2.internal", "ip-10-0-1-12"),
    ("10.0.1.12", "ip-10-0-1-12"),
    ("10.0.1.12:9400", "ip-10-0-1-12"),
    (f"hyperpod-{A}", A),
    (f"ip-10-0-1-12.{A}.slurmd", A),
    ("gpu-node-1.cluster.local", "gpu-node-1"),
    ("2600:1f14:0000::12", "2600:1f14::12"),
    ("  ", None),
])
def test_canonical_spelling_of_names_no_inventory_knows(name: str, form: str | None) -> None:
    from fmdoctor.engine.identity import canonical

    assert canonical(name) == form


def test_a_data_source_can_skip_close_names(ids: NodeIdentities) -> None:
    """Metrics and logs match many labels nobody reads the close names of."""
    assert ids.resolve("gpu-node-9").close and ids.resolve("gpu-node-9", suggest_close=False).close == ()
    assert ids.resolve("gpu-node-1", suggest_close=False).instance is not None


def _tagged(tags_of: dict[str, dict[str, str]]) -> NodeIdentities:
    inventory = _inventory()
    nodes = tuple(Instance(**{**i.__dict__, "tags": tags_of[i.id]}) if i.id in tags_of else i
                  for i in inventory.instances)
    return NodeIdentities.of(Inventory("c", "us-west-2", nodes, inventory.interfaces), ("slurm:hostname",))


@pytest.mark.parametrize("tag, name", [
    (A, A),  # a replacement node whose launch template copied the old node's id into Name
    ("ip-10-0-1-12", "ip-10-0-1-12"),  # a Name tag spelling another node's hostname
    ("ip-10-0-1-12", "ip-10-0-1-12.ec2.internal"),
    ("10.0.1.12", "10.0.1.12"),  # ... or its address
    ("10.0.1.12", "10.0.1.12:9400"),  # DCGM exporter's instance label
    (f"hyperpod-{A}", f"hyperpod-{A}"),
    ("eni-0aaaaaaaaaaaaaaa2", "eni-0aaaaaaaaaaaaaaa2"),
])
def test_a_tag_cannot_take_another_nodes_own_name(tag: str, name: str) -> None:
    """EC2 lets anyone with CreateTags write any Name; an instance's own id, addresses and DNS names are EC2's.
    A tag spelling another node's identity must not make that identity ambiguous or take it over."""
    for key in ("Name", "slurm:hostname"):
        ids = _tagged({B: {key: tag}})
        match = ids.resolve(name)
        assert match.instance is not None and match.instance.id == A, (key, match)


@pytest.mark.parametrize("name", ["i-0dddddddddddddddd", "ip-10-0-1-99.i-0dddddddddddddddd.slurmd",
                                  "10.9.9.9", "ip-10-9-9-9.ec2.internal", "hyperpod-i-0dddddddddddddddd"])
def test_a_tag_spelling_a_foreign_identity_names_no_node(name: str) -> None:
    """A Name tag holding a gone node's id (or an address no node has) does not make that node's log streams,
    alerts and metrics the tagged node's: they stay foreign."""
    ids = _tagged({B: {"Name": "i-0dddddddddddddddd"}, C: {"Name": "10.9.9.9"},
                   A: {"Name": "ip-10-9-9-9", "slurm:hostname": "hyperpod-i-0dddddddddddddddd"}})
    match = ids.resolve(name)
    assert match.instance is None and match.foreign, match


def test_a_tag_spelling_its_own_nodes_identity_still_names_it() -> None:
    ids = _tagged({A: {"Name": A.upper()}, B: {"Name": "ip-10-0-1-13", "slurm:hostname": "10.0.1.13"}})
    assert ids.resolve(A).instance == ids.nodes[A] and ids.resolve("ip-10-0-1-13").instance == ids.nodes[B]
    assert ids.label(A) == f"{A.upper()} ({A})"


def test_an_alias_cannot_take_another_nodes_identity(ids: NodeIdentities) -> None:
    slurm = ids.with_aliases({A: B, "10.0.1.12": B, "i-0dddddddddddddddd": B, "ip-10-0-1-13": B}, via="slurm-node")
    assert slurm.resolve(A).instance == ids.nodes[A] and slurm.resolve("10.0.1.12").instance == ids.nodes[A]
    assert slurm.resolve("i-0dddddddddddddddd").foreign
    assert slurm.resolve("ip-10-0-1-13").instance == ids.nodes[B]  # its own hostname


def test_a_hyperpod_node_keeps_its_id_when_an_ec2_tag_spells_it() -> None:
    node = HyperPodNode("i-0eeeeeeeeeeeeeee5", "workers", "ml.p5.48xlarge", "Running",
                        private_dns="ip-10-1-2-3.us-west-2.compute.internal")
    ids = _tagged({B: {"Name": node.node_id}}).with_hyperpod_nodes([node])
    for name in (node.node_id, f"LifecycleConfig/workers/{node.node_id}"):
        match = ids.resolve(name)
        assert match.instance is not None and match.instance.id == node.node_id, match


def test_a_configured_hostname_tag_may_spell_an_address_no_node_has() -> None:
    """A Slurm node name in a configured hostname tag (ip-10-0-9-9 where the site named nodes so) names its node
    when no node of the inventory has that address; the Name tag stays strict, and another node's address or an
    instance id stays no label."""
    ids = _tagged({A: {"slurm:hostname": "ip-10-0-9-9"}, B: {"Name": "ip-10-0-9-8"}})
    assert ids.resolve("ip-10-0-9-9").instance == ids.nodes[A]
    assert ids.resolve("ip-10-0-9-8").instance is None
    taken = _tagged({B: {"slurm:hostname": "ip-10-0-1-12"}, C: {"slurm:hostname": "i-0dddddddddddddddd"}})
    assert taken.resolve("ip-10-0-1-12").instance == taken.nodes[A]
    assert taken.resolve("i-0dddddddddddddddd").instance is None
