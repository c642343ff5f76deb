from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net.classes import PairOutcome, blocked_outcomes, evaluate_classes, interface_classes, unverified_outcomes
from fmdoctor.net.fetch import TOPOLOGY_IAM_ACTIONS
from fmdoctor.net.model import Flow
from fmdoctor.net.reachability import load_network
from fmdoctor.net.resolve import LUSTRE_PORTS
from fmdoctor.net.storage import STORAGE_IAM_ACTIONS, FileSystem, configured_file_system_ids, fetch_lustre_file_systems

from ._common import plural
from ._net import (
    blocker_evidence,
    by_blocker,
    explain,
    instances_of,
    labels,
    merged_fix,
    note_unverified,
    primary_interfaces,
)

LUSTRE = Flow("tcp", LUSTRE_PORTS)
DIRECTIONS = ("node -> file system", "file system -> node")


class FsxUnreachable(Check):
    """Every cluster node can reach each FSx for Lustre file system in the cluster's VPCs (and any named
    in checkpoints.locations) on TCP 988 and 1018-1023, and the file servers can reach the nodes on the
    same ports, as AWS's Lustre guide requires: security groups, network ACLs and routes both ways.

    A node missing any of these hangs or fails mounting the file system, or stalls mid-job when Lustre
    reconnects; a group that admits 988 but not 1018-1023 is the classic cause.
    """

    id = "fsx-unreachable"
    family = "network"
    severity = Severity.CRITICAL
    iam_actions = tuple(dict.fromkeys(("ec2:DescribeInstances", *STORAGE_IAM_ACTIONS, *TOPOLOGY_IAM_ACTIONS)))

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        wanted = configured_file_system_ids(ctx.settings.checkpoints.locations)
        network = load_network(ctx)
        storage = ctx.shared("net.fsx", lambda: fetch_lustre_file_systems(
            ctx.client("fsx"), ctx.client("ec2"), inv.vpc_ids(), wanted, network.security_groups,
            network.topology.prefix_lists))
        for missing in storage.not_found:
            ctx.unverified(f"reachability of FSx file system {missing} (checkpoints.locations)", "FileSystemNotFound",
                           f"{missing} is not in {ctx.region}")
        if not storage.systems:
            raise NotApplicable("no FSx for Lustre file system in the cluster's VPCs or checkpoints.locations")
        network = load_network(ctx, [s.vpc_id for s in storage.systems])
        network = network.with_extras(storage.interfaces.values(), storage.security_groups, storage.prefix_lists)
        clients = interface_classes(network, primary_interfaces(inv, inv.instances), what="interface")
        findings = []
        for system in storage.systems:
            members = [storage.interfaces[e] for e in system.interface_ids if e in storage.interfaces]
            if not members:
                ctx.unverified(f"reachability of {system.id}", "InterfacesNotFound",
                               f"{system.id} reports no network interfaces ({system.lifecycle or 'unknown state'})")
                continue
            servers = interface_classes(network, members, by_public_ip=False, what=f"{system.id} interface")
            forward = evaluate_classes(network, clients, servers, LUSTRE)
            back = evaluate_classes(network, servers, clients, LUSTRE)
            note_unverified(ctx, f"Lustre ports of {system.id}", [o.result for g in (forward, back)
                                                                  for o in unverified_outcomes(g)])
            blocked = {DIRECTIONS[0]: blocked_outcomes(forward), DIRECTIONS[1]: blocked_outcomes(back)}
            if any(blocked.values()):
                findings.append(self._finding(ctx, system, blocked, len(forward.edges) + len(back.edges)))
        return findings

    def _finding(self, ctx: CheckContext, system: FileSystem, blocked: dict[str, list[PairOutcome]],
                 evaluated: int) -> Finding:
        inv = ctx.inventory
        everything = [o for outcomes in blocked.values() for o in outcomes]
        groups = by_blocker(everything)
        reason, outcomes = groups[0]
        nodes = sorted({*instances_of(blocked[DIRECTIONS[0]], "source"),
                        *instances_of(blocked[DIRECTIONS[1]], "destination")})
        directions = [d for d in DIRECTIONS if blocked[d]]
        return self.finding(
            resource=system.id,
            summary=(
                f"FSx for Lustre {system.label} is unreachable for {plural(len(nodes), 'node')} on the Lustre ports "
                f"(TCP 988, 1018-1023): {explain(reason, outcomes, inv)}."
            ),
            evidence={
                "file_system": system.id,
                "dns_name": system.dns_name,
                "required_ports": "tcp/988, tcp/1018-1023 (both directions)",
                "directions_blocked": directions,
                **blocker_evidence(reason, outcomes[0].result),
                "node_count": len(nodes),
                "example_node": nodes[0] if nodes else "",
                "nodes": labels(inv, nodes),
                "blockers": [{"code": b.code, "resource": b.resource, "summary": b.summary} for b, _ in groups][:10],
                "class_pairs_evaluated": evaluated,
                "fix": merged_fix(o.result.blocked_by for o in everything if o.result.blocked_by),
            },
        )
