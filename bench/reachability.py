"""All-pairs EFA reachability: class-based (what efa-peer-unreachable does) against naive per-pair evaluation.

    python bench/reachability.py            # 50, 500 and 5,000 instances
    python bench/reachability.py --quick    # 50 and 500, small naive sample (seconds; CI runs it)

Builds synthetic VPCs as plain data (no AWS, no moto): instances with EFA interfaces spread over two
subnets, most in a self-referencing EFA group and some in a legacy group without its egress rule, so
both verdicts occur. For each size it times the real check (interfaces grouped into (subnet, groups)
classes, one evaluation per class pair) and a naive evaluation of ordered instance pairs, measured on a
sample and extrapolated to all pairs (marked ``~``), and checks that both give the same verdict on every
sampled pair. Exit status 1 if they ever disagree.
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
from fmdoctor.net.classes import evaluate_classes, interface_classes
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


def class_based(inventory: Inventory) -> tuple[float, int]:
    """Run the real check; returns (seconds, findings)."""
    scope = RunScope(cluster="bench", settings=ClusterSettings(), aws=None, inventory=inventory,
                     now=datetime.now(UTC))
    started = time.perf_counter()
    findings = EfaPeerUnreachable().run(CheckContext(scope=scope, check_id=EfaPeerUnreachable.id))
    return time.perf_counter() - started, len(findings)


def naive(inventory: Inventory, pairs: list[tuple[Instance, Instance]]) -> tuple[float, dict]:
    """Evaluate each pair on its own: every instance's first EFA interface towards every other's."""
    network = Network.build(inventory, Topology(region=inventory.region))
    first = {i.id: network.interface_endpoint(inventory.interfaces[i.interface_ids[0]]) for i in inventory.instances}
    verdicts = {}
    started = time.perf_counter()
    for a, b in pairs:
        if a.subnet_id != b.subnet_id:
            continue  # like the check: cross-subnet pairs are efa-subnet-spread's
        verdicts[(a.id, b.id)] = analyze_endpoints(network, first[a.id], first[b.id], EFA).reachable
    return time.perf_counter() - started, verdicts


def class_verdicts(inventory: Inventory, pairs: list[tuple[Instance, Instance]]) -> tuple[dict, int, float]:
    """The class-based verdict for each sampled pair, read from the classes' graph; the class pairs; and
    the seconds the pair evaluation itself took (grouping excluded)."""
    network = Network.build(inventory, Topology(region=inventory.region))
    classes = interface_classes(network, inventory.efa_interfaces(), by_public_ip=False)
    of = {m.instance_id: c.key for c in classes for m in c.members}
    started = time.perf_counter()
    graph = evaluate_classes(network, classes, classes, EFA, skip=lambda a, b: a.key[0] != b.key[0])
    evaluation = time.perf_counter() - started
    verdicts = {(a.id, b.id): graph.edges[of[a.id], of[b.id]]["reachable"] for a, b in pairs
                if a.subnet_id == b.subnet_id}
    return verdicts, graph.number_of_edges(), evaluation


def run(sizes: list[int], budget: int, interfaces: int, seed: int) -> int:
    rng = random.Random(seed)
    print(f"{'nodes':>6} {'EFA ENIs':>8} {'class pairs':>11} {'pair eval':>10} {'class-based':>12} "
          f"{'node pairs':>12} {'naive':>10} {'speedup':>8} {'growth':>7} agree")
    previous = None
    disagreements = 0
    for size in sizes:
        inventory = synthetic_inventory(size, interfaces)
        nodes = inventory.instances
        total_pairs = size * (size - 1)
        if total_pairs <= budget:
            sample, extrapolated = [(a, b) for a in nodes for b in nodes if a is not b], False
        else:
            sample = [(a, b) for a, b in ((rng.choice(nodes), rng.choice(nodes)) for _ in range(budget)) if a is not b]
            extrapolated = True
        seconds, findings = class_based(inventory)
        naive_seconds, naive_verdicts = naive(inventory, sample)
        # Same-subnet share of the sample stands for the same share of all pairs.
        naive_total = naive_seconds * total_pairs / max(1, len(sample))
        verdicts, class_pairs, evaluation = class_verdicts(inventory, sample)
        agree = naive_verdicts == verdicts and findings > 0
        disagreements += not agree
        growth = f"{seconds / previous:.1f}x" if previous else "-"
        mark = "~" if extrapolated else " "
        print(f"{size:>6} {len(inventory.interfaces):>8} {class_pairs:>11} {evaluation * 1000:>8.2f}ms "
              f"{seconds * 1000:>10.1f}ms "
              f"{total_pairs:>12,} {mark}{naive_total:>8.2f}s {naive_total / max(seconds, 1e-9):>7.0f}x "
              f"{growth:>7} {'yes' if agree else 'NO'}")
        previous = seconds
    print(f"class-based: the whole efa-peer-unreachable check (grouping every interface is linear; 'pair eval' is "
          f"the class-pair evaluation alone, flat). naive: each ordered pair of instances (first EFA interface) "
          f"evaluated on its own; ~ = extrapolated from {budget:,} sampled pairs. growth: class-based time "
          f"against the previous size.")
    return 1 if disagreements else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 and 500 instances, small naive sample")
    parser.add_argument("--sizes", help="comma-separated instance counts (default 50,500,5000)")
    parser.add_argument("--interfaces", type=int, default=4, help="EFA interfaces per instance (default 4)")
    parser.add_argument("--naive-pairs", type=int, help="pairs the naive evaluation measures (then extrapolates)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([50, 500] if args.quick else [50, 500, 5000])
    budget = args.naive_pairs or (1000 if args.quick else 20000)
    return run(sizes, budget, args.interfaces, args.seed)


if __name__ == "__main__":
    sys.exit(main())
