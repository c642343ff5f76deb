"""All-pairs EFA reachability: class-based (what efa-peer-unreachable does) against naive per-pair evaluation.

    python bench/reachability.py            # 50, 500 and 5,000 instances; 5,000 in 800 classes
    python bench/reachability.py --quick    # 50 and 500; 800 in 800 classes; small naive sample (CI runs it)

Builds synthetic VPCs as plain data (no AWS, no moto): instances with EFA interfaces spread over two
subnets, most in a self-referencing EFA group and some in a legacy group without its egress rule, so
both verdicts occur; and a world of many classes (:func:`many_classes_inventory`: 16 subnets in 4 zones,
50 node groups each with a group of its own besides the EFA group, 800 classes). For each it times the
real check (interfaces grouped into (subnet, groups) classes, classes with the same groups into blocks, one
evaluation per ordered pair of blocks) and a naive evaluation of the ordered instance pairs the check judges
(one zone and VPC), measured on a sample and extrapolated to all pairs (marked ``~``), and checks that both
give the same verdict on every sampled pair. Exit status 1 if they ever disagree.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime

from fmdoctor.checks.efa_peer_unreachable import EfaPeerUnreachable
from fmdoctor.config import ClusterSettings
from fmdoctor.engine.context import CheckContext, RunScope
from fmdoctor.engine.inventory import (
    Instance,
    InstanceTypeInfo,
    Inventory,
    NetworkInterface,
    SecurityGroup,
    SgRule,
    Subnet,
)
from fmdoctor.net.analyze import analyze_endpoints
from fmdoctor.net.classes import evaluate_efa_classes, interface_classes
from fmdoctor.net.efa import SAME, boundary
from fmdoctor.net.model import Flow
from fmdoctor.net.network import Network
from fmdoctor.net.topology import Topology

EFA = Flow("-1", efa=True)
SUBNETS = {"subnet-a": "10.0.0.0/17", "subnet-b": "10.0.128.0/17"}


def synthetic_inventory(instances: int, interfaces_per_instance: int = 4, legacy_share: float = 0.1) -> Inventory:
    """A cluster VPC of ``instances`` p4d-like nodes; every 10th node uses the legacy group (no egress rule)."""
    efa = SecurityGroup("sg-efa", "efa", "vpc-1", (
        SgRule("sgr-1", "sg-efa", False, "-1", referenced_group_id="sg-efa"),
        SgRule("sgr-2", "sg-efa", True, "-1", referenced_group_id="sg-efa"),
    ))
    legacy = SecurityGroup("sg-legacy", "efa-legacy", "vpc-1", (
        SgRule("sgr-3", "sg-legacy", False, "-1", referenced_group_id="sg-efa"),
        SgRule("sgr-4", "sg-legacy", True, "-1", cidr_ipv4="0.0.0.0/0"),
    ))
    nodes, enis = [], {}
    legacy_every = max(1, round(1 / legacy_share)) if legacy_share else 0
    for n in range(instances):
        subnet = "subnet-a" if n % 8 else "subnet-b"
        groups = ("sg-legacy",) if legacy_every and n % legacy_every == 3 else ("sg-efa",)
        base = (10 << 24) + (0 if subnet == "subnet-a" else 128 << 8) + 16 + n * interfaces_per_instance
        ids = []
        for k in range(interfaces_per_instance):
            value = base + k
            ip = ".".join(str((value >> s) & 255) for s in (24, 16, 8, 0))
            eni = NetworkInterface(f"eni-{n:05d}{k:02d}", subnet, "vpc-1", groups, (ip,), interface_type="efa",
                                   instance_id=f"i-{n:08d}", device_index=k, network_card_index=k)
            enis[eni.id] = eni
            ids.append(eni.id)
        nodes.append(Instance(f"i-{n:08d}", "p4d.24xlarge", "running", subnet, "vpc-1", "us-west-2a",
                              tags={"Name": f"gpu-{n}"}, interface_ids=tuple(ids)))
    return Inventory(
        cluster="bench", region="us-west-2", instances=tuple(nodes), interfaces=enis,
        security_groups={"sg-efa": efa, "sg-legacy": legacy},
        subnets={s: Subnet(s, "vpc-1", "us-west-2a", c) for s, c in SUBNETS.items()},
        instance_types={"p4d.24xlarge": InstanceTypeInfo("p4d.24xlarge", gpus=8, efa_supported=True,
                                                         max_efa_interfaces=4)},
    )


def many_classes_inventory(instances: int, interfaces_per_instance: int = 4, subnets: int = 16, node_groups: int = 50,
                           zones: int = 4, legacy_every: int = 10) -> Inventory:
    """A VPC of ``subnets`` subnets over ``zones`` zones and ``node_groups`` node groups (EKS-like: each node's
    interfaces in the cluster's EFA group and its node group's own group), node n in subnet n % subnets and
    group (n // subnets) % node_groups: subnets x node groups classes. Every ``legacy_every``-th node group
    uses the legacy EFA group (no egress rule), so both verdicts occur."""
    groups = {
        "sg-efa": SecurityGroup("sg-efa", "efa", "vpc-1", (
            SgRule("sgr-1", "sg-efa", False, "-1", referenced_group_id="sg-efa"),
            SgRule("sgr-2", "sg-efa", True, "-1", referenced_group_id="sg-efa"))),
        "sg-legacy": SecurityGroup("sg-legacy", "efa-legacy", "vpc-1", (
            SgRule("sgr-3", "sg-legacy", False, "-1", referenced_group_id="sg-efa"),
            SgRule("sgr-4", "sg-legacy", True, "-1", cidr_ipv4="0.0.0.0/0"))),
    }
    for g in range(node_groups):
        gid = f"sg-ng{g:03d}"
        groups[gid] = SecurityGroup(gid, f"nodegroup-{g}", "vpc-1", (
            SgRule(f"sgr-ng{g}", gid, False, "tcp", 22, 22, cidr_ipv4="10.0.0.0/8"),))
    subnet_ids = [f"subnet-{s:02d}" for s in range(subnets)]
    zone_names = [f"us-west-2{chr(ord('a') + z)}" for z in range(zones)]
    subnet_of = {sid: Subnet(sid, "vpc-1", zone_names[k % zones], f"10.{k}.0.0/16", f"usw2-az{k % zones + 1}")
                 for k, sid in enumerate(subnet_ids)}
    nodes, enis = [], {}
    for n in range(instances):
        k, g = n % subnets, (n // subnets) % node_groups
        subnet = subnet_ids[k]
        node_groups_of = ("sg-legacy" if g % legacy_every == 3 else "sg-efa", f"sg-ng{g:03d}")
        ids = []
        for i in range(interfaces_per_instance):
            value = n * interfaces_per_instance + i
            eni = NetworkInterface(f"eni-{n:05d}{i:02d}", subnet, "vpc-1", node_groups_of,
                                   (f"10.{k}.{(value >> 8) & 255}.{value & 255}",), interface_type="efa",
                                   instance_id=f"i-{n:08d}", device_index=i, network_card_index=i)
            enis[eni.id] = eni
            ids.append(eni.id)
        nodes.append(Instance(f"i-{n:08d}", "p4d.24xlarge", "running", subnet, "vpc-1",
                              subnet_of[subnet].availability_zone, tags={"Name": f"gpu-{n}"}, interface_ids=tuple(ids)))
    return Inventory(
        cluster="bench", region="us-west-2", instances=tuple(nodes), interfaces=enis, security_groups=groups,
        subnets=subnet_of,
        instance_types={"p4d.24xlarge": InstanceTypeInfo("p4d.24xlarge", gpus=8, efa_supported=True,
                                                         max_efa_interfaces=4)},
    )


def class_based(inventory: Inventory) -> tuple[float, int]:
    """Run the real check; returns (seconds, findings)."""
    scope = RunScope(cluster="bench", settings=ClusterSettings(), aws=None, inventory=inventory,
                     now=datetime.now(UTC))
    started = time.perf_counter()
    findings = EfaPeerUnreachable().run(CheckContext(scope=scope, check_id=EfaPeerUnreachable.id))
    return time.perf_counter() - started, len(findings)


def naive(inventory: Inventory, pairs: list[tuple[Instance, Instance]]) -> tuple[float, dict]:
    """Evaluate each pair on its own: every instance's first EFA interface towards every other's; (CPU seconds,
    verdicts)."""
    network = Network.build(inventory, Topology(region=inventory.region))
    first = {i.id: network.interface_endpoint(inventory.interfaces[i.interface_ids[0]]) for i in inventory.instances}
    verdicts = {}
    started = time.process_time()
    for a, b in pairs:
        if boundary(network.subnets, a.subnet_id, b.subnet_id) != SAME:
            continue  # like the check: pairs across zones or VPCs are efa-subnet-spread's
        verdicts[(a.id, b.id)] = analyze_endpoints(network, first[a.id], first[b.id], EFA).reachable
    return time.process_time() - started, verdicts


def class_verdicts(inventory: Inventory, pairs: list[tuple[Instance, Instance]]) -> tuple[dict, int, float, int]:
    """The class-based verdict for each sampled pair, read from the check's blocks; the class pairs judged; the
    seconds the verdicts of every class pair took (grouping excluded); and the block pairs evaluated."""
    network = Network.build(inventory, Topology(region=inventory.region))
    classes = interface_classes(network, inventory.efa_interfaces(), by_public_ip=False)
    of = {m.instance_id: c for c in classes for m in c.members}
    started = time.perf_counter()
    judged = evaluate_efa_classes(network, classes, EFA)
    class_pairs = sum(1 for a, b in judged.pairs() if judged.reachable(a, b) in (True, False, None))  # all decided
    evaluation = time.perf_counter() - started
    verdicts = {(a.id, b.id): judged.reachable(of[a.id], of[b.id]) for a, b in pairs
                if boundary(network.subnets, a.subnet_id, b.subnet_id) == SAME}
    return verdicts, class_pairs, evaluation, judged.evaluated


WORLDS = {"2 subnets": synthetic_inventory, "800 classes": many_classes_inventory}


def measure(world: str, size: int, budget: int, rng: random.Random, interfaces: int = 4) -> dict:
    """One world at one size: the check's wall and CPU time, the naive time (extrapolated past ``budget`` sampled
    pairs), and whether both agree on every sampled pair."""
    inventory = WORLDS[world](size, interfaces)
    nodes = inventory.instances
    total_pairs = size * (size - 1)
    if total_pairs <= budget:
        sample, extrapolated = [(a, b) for a in nodes for b in nodes if a is not b], False
    else:
        sample = [(a, b) for a, b in ((rng.choice(nodes), rng.choice(nodes)) for _ in range(budget)) if a is not b]
        extrapolated = True
    cpu = time.process_time()
    seconds, findings = class_based(inventory)
    cpu = time.process_time() - cpu
    naive_seconds, naive_verdicts = naive(inventory, sample)
    verdicts, class_pairs, evaluation, block_pairs = class_verdicts(inventory, sample)
    network = Network.build(inventory, Topology(region=inventory.region))
    classes = len(interface_classes(network, inventory.efa_interfaces(), by_public_ip=False))
    # The sample's share of pairs the check judges stands for the same share of all pairs.
    naive_total = naive_seconds * total_pairs / max(1, len(sample))  # CPU seconds, as the speed-up compares
    return {"world": world, "nodes": size, "interfaces": len(inventory.interfaces), "classes": classes,
            "class_pairs": class_pairs, "block_pairs": block_pairs, "evaluation_s": evaluation, "class_s": seconds,
            "class_cpu_s": cpu, "naive_s": naive_total, "extrapolated": extrapolated, "node_pairs": total_pairs,
            "agree": naive_verdicts == verdicts and findings > 0}


def run(cases: list[tuple[str, int]], budget: int, interfaces: int, seed: int) -> int:
    rng = random.Random(seed)
    print(f"{'nodes':>6} {'world':>11} {'EFA ENIs':>8} {'classes':>7} {'class pairs':>11} {'block pairs':>11} "
          f"{'pair eval':>10} {'class-based':>12} {'its CPU':>9} {'node pairs':>12} {'naive CPU':>10} "
          f"{'speedup':>8} agree")
    disagreements = 0
    for world, size in cases:
        r = measure(world, size, budget, rng, interfaces)
        disagreements += not r["agree"]
        mark = "~" if r["extrapolated"] else " "
        print(f"{size:>6} {world:>11} {r['interfaces']:>8} {r['classes']:>7} {r['class_pairs']:>11,} "
              f"{r['block_pairs']:>11,} {r['evaluation_s'] * 1000:>8.1f}ms {r['class_s'] * 1000:>10.1f}ms "
              f"{r['class_cpu_s'] * 1000:>7.0f}ms {r['node_pairs']:>12,} {mark}{r['naive_s']:>8.2f}s "
              f"{r['naive_s'] / max(r['class_cpu_s'], 1e-9):>7.0f}x {'yes' if r['agree'] else 'NO'}")
    print(f"class-based: the whole efa-peer-unreachable check, wall and CPU ('pair eval': the verdicts of every "
          f"class pair alone, from one evaluation per block pair). naive: each ordered pair of instances in one zone "
          f"and VPC (first EFA interface) evaluated on its own, CPU time; ~ = extrapolated from {budget:,} sampled "
          f"pairs. speedup: naive CPU over class-based CPU (the machine is shared: CPU is the steadier figure). "
          f"Worlds: '2 subnets' (one zone, an EFA group and a legacy one: 3 classes), '800 classes' (16 subnets in "
          f"4 zones x 50 node groups).")
    return 1 if disagreements else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 and 500 instances, 800 in 800 classes, small sample")
    parser.add_argument("--sizes", help="comma-separated instance counts (default 50,500,5000)")
    parser.add_argument("--many-classes", help="comma-separated instance counts of the 800-class world "
                        "(default 5000; --quick: 800)")
    parser.add_argument("--interfaces", type=int, default=4, help="EFA interfaces per instance (default 4)")
    parser.add_argument("--naive-pairs", type=int, help="pairs the naive evaluation measures (then extrapolates)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([50, 500] if args.quick else [50, 500, 5000])
    many = ([int(s) for s in args.many_classes.split(",") if s] if args.many_classes is not None
            else [800] if args.quick else [5000])
    budget = args.naive_pairs or (1000 if args.quick else 20000)
    cases = [("2 subnets", n) for n in sizes] + [("800 classes", n) for n in many]
    return run(cases, budget, args.interfaces, args.seed)


if __name__ == "__main__":
    sys.exit(main())
