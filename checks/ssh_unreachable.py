from __future__ import annotations

import ipaddress

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE, SECURITY_GROUP
from fmdoctor.engine.inventory import HEAD, LOGIN
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.net.analyze import analyze_endpoints
from fmdoctor.net.fetch import TOPOLOGY_IAM_ACTIONS
from fmdoctor.net.model import Endpoint, Flow, ReachabilityResult
from fmdoctor.net.network import INTERNET, Network
from fmdoctor.net.reachability import load_network
from fmdoctor.net.space import cidr_range, ranges_overlap

from ._net import as_blocked, blocker_evidence, caveat_evidence, merged_fix, note_unverified, primary_interfaces


class SshUnreachable(Check):
    """Every head and login node accepts SSH (network.ssh_port, default 22) from every admin CIDR in
    network.admin_cidrs: a route back to the admins (an internet gateway and a public IP, or a VPN,
    peering or transit path), the subnet's network ACL both ways and the node's security groups.

    When it fails nobody can log in to submit jobs or debug; the usual cause is a security group opened
    to the VPC or to an old office range only. The reply leaves through the network ACL to the admin's
    ephemeral port, which depends on the admin's machine: the VPC guide
    (docs.aws.amazon.com/vpc/latest/userguide/nacl-ephemeral-ports.html) says "The client that initiates the
    request chooses the ephemeral port range" and recommends opening 1024-65535. An ACL that admits the
    replies to some common clients' ranges only (32768-65535 serves Linux, Windows and macOS, not a NAT
    gateway's 1024-65535) is a warning naming who would fail; one that admits none of them is critical.
    """

    id = "ssh-unreachable"
    family = "network"
    concerns = frozenset({NODE, SECURITY_GROUP})
    severity = Severity.CRITICAL
    iam_actions = ("ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeSecurityGroupRules",
                   *TOPOLOGY_IAM_ACTIONS)

    def run(self, ctx: CheckContext) -> list[Finding]:
        cidrs = ctx.settings.network.admin_cidrs
        if not cidrs:
            raise NotApplicable("no admin CIDRs configured (network.admin_cidrs)")
        inv = ctx.inventory
        nodes = [i for i in inv.instances if i.role in (HEAD, LOGIN)]
        if not nodes:
            raise NotApplicable("no head or login node (tags parallelcluster:node-type or fmdoctor:role, or "
                                "head_nodes in the config)")
        network = load_network(ctx)
        port = ctx.settings.network.ssh_port
        flow = Flow("tcp", ((port, port),))
        sources = [s for s in (self._source(ctx, network, c) for c in cidrs) if s is not None]
        findings = []
        for eni in primary_interfaces(inv, nodes):
            destination = network.interface_endpoint(eni)
            results = [analyze_endpoints(network, source, destination, flow) for source in sources]
            note_unverified(ctx, f"SSH on {port}", [r for r in results if r.reachable is None])
            blocked = [r for r in results if r.reachable is False]
            if blocked:
                findings.append(self._finding(ctx, eni.instance_id or eni.id, port, blocked))
            warned = [r for r in results if r.reachable is True and r.warnings]
            if warned:
                findings.append(self._warning(ctx, eni.instance_id or eni.id, port, warned))
        return findings

    def _warning(self, ctx: CheckContext, instance_id: str, port: int, warned: list[ReachabilityResult]) -> Finding:
        inv = ctx.inventory
        first = warned[0]
        caveat = first.warnings[0]
        instance = inv.instance(instance_id)
        role = instance.role if instance else HEAD
        cidrs = [r.source.resource for r in warned]
        return self.finding(
            resource=instance_id,
            severity=Severity.WARNING,
            summary=(
                f"The {role} node {inv.label(instance_id)} answers SSH on TCP {port} from {', '.join(cidrs)} only "
                f"for some clients: {caveat.summary}; {caveat.remedy}."
            ),
            evidence={
                "instance": instance_id,
                "role": role,
                "port": port,
                "admin_cidrs_affected": cidrs,
                **caveat_evidence(caveat, first),
                "interface": first.destination.resource,
                "public_ip": first.destination.public_ip,
                "security_groups": list(first.destination.group_ids),
                "fix": merged_fix(as_blocked(w) for r in warned for w in r.warnings),
            },
        )

    def _source(self, ctx: CheckContext, network: Network, cidr: str) -> Endpoint | None:
        net = ipaddress.ip_network(cidr, strict=False)
        if net.version != 4:
            ctx.unverified(f"SSH from {cidr}", "NotEvaluated", "IPv6 admin CIDRs are not evaluated")
            return None
        ranges = (cidr_range(str(net)),)
        if any(ranges_overlap(ranges, network.topology.vpc_ranges(v)) for v in network.topology.vpc_ids):
            ctx.unverified(f"SSH from {cidr}", "NotEvaluated",
                           "this admin CIDR is inside the cluster's VPC; name the bastion or VPN host instead")
            return None
        label = f"admin CIDR {net}"
        return Endpoint("internet" if ranges == INTERNET else "cidr", label, str(net), ranges, query=cidr)

    def _finding(self, ctx: CheckContext, instance_id: str, port: int, blocked: list[ReachabilityResult]) -> Finding:
        inv = ctx.inventory
        first = blocked[0]
        reason = first.blocked_by
        assert reason is not None
        instance = inv.instance(instance_id)
        role = instance.role if instance else HEAD
        cidrs = [r.source.resource for r in blocked]
        return self.finding(
            resource=instance_id,
            summary=(
                f"The {role} node {inv.label(instance_id)} cannot be reached on TCP {port} from "
                f"{', '.join(cidrs)}: {reason.summary}; {reason.evidence.get('remedy', '')}."
            ),
            evidence={
                "instance": instance_id,
                "role": role,
                "port": port,
                "admin_cidrs_blocked": cidrs,
                **blocker_evidence(reason, first),
                "interface": first.destination.resource,
                "public_ip": first.destination.public_ip,
                "security_groups": list(first.destination.group_ids),
                "blocked_by_cidr": {r.source.resource: r.blocked_by.code for r in blocked if r.blocked_by},
                "fix": merged_fix(r.blocked_by for r in blocked if r.blocked_by),
            },
        )
