from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import FILE_SYSTEM, NODE, SECURITY_GROUP
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net import replies
from fmdoctor.net.classes import InterfaceClass, PairOutcome, evaluate_classes, interface_classes
from fmdoctor.net.efa import SAME, boundary
from fmdoctor.net.fetch import TOPOLOGY_IAM_ACTIONS
from fmdoctor.net.model import Caveat, Flow
from fmdoctor.net.network import Network
from fmdoctor.net.reachability import load_network
from fmdoctor.net.resolve import LUSTRE_PORTS
from fmdoctor.net.storage import (
    FILE_SYSTEMS,
    STORAGE_IAM_ACTIONS,
    FileSystem,
    configured_file_system_ids,
    fetch_lustre_file_systems,
)

from ._common import plural
from ._net import (
    as_blocked,
    blocker_evidence,
    by_blocker,
    by_caveat,
    caveat_evidence,
    explain,
    instances_of,
    labels,
    merged_fix,
    note_unverified,
    primary_interfaces,
)

LUSTRE = Flow("tcp", LUSTRE_PORTS, clients=(replies.LUSTRE,))
EFA = Flow("-1", efa=True)
TO_FS, FROM_FS, SERVERS = "node -> file system", "file system -> node", "file server -> file server"
EFA_TO_FS, EFA_FROM_FS, EFA_SERVERS = (f"{d} (EFA)" for d in (TO_FS, FROM_FS, SERVERS))
NODE_SIDE = {TO_FS: "source", FROM_FS: "destination", EFA_TO_FS: "source", EFA_FROM_FS: "destination"}


class FsxUnreachable(Check):
    """Every cluster node can reach each FSx for Lustre file system in the cluster's VPCs (and any named in
    checkpoints.locations) on TCP 988 and 1018-1023, the file servers can reach the nodes on the same ports and
    each other, and, for an EFA-enabled file system, EFA traffic flows between it and the nodes' EFA interfaces:
    security groups, network ACLs and routes both ways.

    The FSx for Lustre guide (docs.aws.amazon.com/fsx/latest/LustreGuide/cannot-create-fs.html): "You must set
    up the security group to allow inbound traffic on ports 988 and 1018-1023 from the security group itself or
    the full subnet CIDR, which is required to allow the file system hosts to communicate with each other", and
    for an EFA-enabled file system (LustreConfiguration.EfaEnabled) "An EFA requires a security group that allows
    all inbound and outbound traffic to and from the security group itself and the security group of the
    clients if clients reside in a different security group". LNet connects from its reserved ports, so replies
    go to 1018-1023 (a network ACL opening 988 and 1018-1023 both ways is enough; fmdoctor.net.replies). A node
    missing any of this hangs or fails mounting, or stalls mid-job when Lustre reconnects; a group that admits
    988 but not 1018-1023 is the classic cause.
    """

    id = "fsx-unreachable"
    family = "network"
    concerns = frozenset({NODE, SECURITY_GROUP, FILE_SYSTEM})
    severity = Severity.CRITICAL
    iam_actions = tuple(dict.fromkeys(("ec2:DescribeInstances", *STORAGE_IAM_ACTIONS, *TOPOLOGY_IAM_ACTIONS)))
    prefetch = (FILE_SYSTEMS,)

    def run(self, ctx: CheckContext) -> list[Finding]:
        inv = ctx.inventory
        wanted = configured_file_system_ids(ctx.settings.checkpoints.locations)
        network = load_network(ctx)
        storage = ctx.shared("net.fsx", lambda: fetch_lustre_file_systems(
            ctx.client("fsx"), ctx.client("ec2"), inv.vpc_ids(), wanted, network.security_groups,
            network.topology.prefix_lists, FILE_SYSTEMS.get(ctx)))
        for missing in storage.not_found:
            ctx.unverified(f"reachability of FSx file system {missing} (checkpoints.locations)", "FileSystemNotFound",
                           f"{missing} is not in {ctx.region}")
        if not storage.systems:
            raise NotApplicable("no FSx for Lustre file system in the cluster's VPCs or checkpoints.locations")
        network = load_network(ctx, [s.vpc_id for s in storage.systems])
        network = network.with_extras(storage.interfaces.values(), storage.security_groups, storage.prefix_lists)
        clients = interface_classes(network, primary_interfaces(inv, inv.instances), what="interface")
        efa_clients = interface_classes(network, inv.efa_interfaces(), by_public_ip=False, what="EFA interface")
        findings = []
        for system in storage.systems:
            members = [storage.interfaces[e] for e in system.interface_ids if e in storage.interfaces]
            if not members:
                ctx.unverified(f"reachability of {system.id}", "InterfacesNotFound",
                               f"{system.id} reports no network interfaces ({system.lifecycle or 'unknown state'})")
                continue
            servers = interface_classes(network, members, by_public_ip=False, what=f"{system.id} interface")
            outcomes = self._evaluate(network, system, clients, efa_clients, servers)
            note_unverified(ctx, f"Lustre traffic of {system.id}", [o.result for d in outcomes.values() for o in d
                                                                   if o.result.reachable is None])
            blocked = {d: [o for o in found if o.result.reachable is False] for d, found in outcomes.items()}
            evaluated = sum(len(found) for found in outcomes.values())
            if any(blocked.values()):
                findings.append(self._finding(ctx, system, blocked, evaluated))
            elif warned := by_caveat(o for found in outcomes.values() for o in found):
                findings.append(self._warning(ctx, system, warned))
        return findings

    @staticmethod
    def _evaluate(network: Network, system: FileSystem, clients: list[InterfaceClass],
                  efa_clients: list[InterfaceClass], servers: list[InterfaceClass]) -> dict[str, list[PairOutcome]]:
        """Outcomes by direction: Lustre's TCP ports both ways and between the servers; EFA too when enabled."""
        def outcomes(sources: list[InterfaceClass], destinations: list[InterfaceClass], flow: Flow,
                     efa: bool = False) -> list[PairOutcome]:
            # EFA clients in another zone mount over TCP (judged above): only same-zone EFA pairs are expected.
            skip = (lambda a, b: boundary(network.subnets, a.key[0], b.key[0]) != SAME) if efa else None
            graph = evaluate_classes(network, sources, destinations, flow, skip=skip)
            return [o for _, _, data in graph.edges(data=True) for o in data["outcomes"]]

        found = {TO_FS: outcomes(clients, servers, LUSTRE), FROM_FS: outcomes(servers, clients, LUSTRE),
                 SERVERS: outcomes(servers, servers, LUSTRE)}
        if system.efa_enabled:
            found.update({EFA_TO_FS: outcomes(efa_clients, servers, EFA, efa=True),
                          EFA_FROM_FS: outcomes(servers, efa_clients, EFA, efa=True),
                          EFA_SERVERS: outcomes(servers, servers, EFA, efa=True)})
        return found

    def _finding(self, ctx: CheckContext, system: FileSystem, blocked: dict[str, list[PairOutcome]],
                 evaluated: int) -> Finding:
        inv = ctx.inventory
        everything = [o for outcomes in blocked.values() for o in outcomes]
        groups = by_blocker(everything)
        reason, outcomes = groups[0]
        nodes = sorted({i for d, side in NODE_SIDE.items() for i in instances_of(blocked.get(d, []), side)})
        directions = [d for d, found in blocked.items() if found]
        what = "the Lustre ports (TCP 988, 1018-1023)" + (" and EFA" if system.efa_enabled else "")
        who = plural(len(nodes), "node") if nodes else "its own file servers"
        return self.finding(
            resource=system.id,
            summary=(
                f"FSx for Lustre {system.label} is unreachable for {who} on {what}: "
                f"{explain(reason, outcomes, inv)}."
            ),
            evidence={
                "file_system": system.id,
                "dns_name": system.dns_name,
                "efa_enabled": system.efa_enabled,
                "required_ports": "tcp/988, tcp/1018-1023 (both directions, and between the file servers)"
                                  + ("; all traffic between EFA interfaces and the file system's group"
                                     if system.efa_enabled else ""),
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

    def _warning(self, ctx: CheckContext, system: FileSystem,
                 warned: list[tuple[Caveat, list[PairOutcome]]]) -> Finding:
        inv = ctx.inventory
        caveat, outcomes = warned[0]
        nodes = sorted({*instances_of(outcomes, "source"), *instances_of(outcomes, "destination")})
        return self.finding(
            resource=system.id,
            severity=Severity.WARNING,
            summary=f"FSx for Lustre {system.label} drops some Lustre replies: {caveat.summary}; {caveat.remedy}.",
            evidence={
                "file_system": system.id,
                "dns_name": system.dns_name,
                "efa_enabled": system.efa_enabled,
                "required_ports": "tcp/988, tcp/1018-1023 (both directions, and between the file servers)",
                "directions_blocked": [],
                **caveat_evidence(caveat, outcomes[0].result),
                "node_count": len(nodes),
                "example_node": nodes[0] if nodes else "",
                "nodes": labels(inv, nodes),
                "blockers": [],
                "class_pairs_evaluated": len(outcomes),
                "fix": merged_fix(as_blocked(c) for _, group in warned for o in group for c in o.result.warnings),
            },
        )
