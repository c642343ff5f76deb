from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.node import fi_info

from ._node import first_line, identity, node_resource, unknown_type


class NodeEfaProvider(Check):
    """On this node libfabric's EFA provider is installed and answers (fi_info -p efa), offers the RDM endpoint
    NCCL uses, and sees as many EFA devices as the instance type supports.

    Without it NCCL silently falls back to TCP sockets: training runs, only many times slower.
    """

    id = "node-efa-provider"
    family = "efa"
    severity = Severity.CRITICAL
    iam_actions = ()
    targets = frozenset({"node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        who = identity(ctx)
        expected = who.facts.max_efa_interfaces if who.facts else None
        if expected == 0:
            raise NotApplicable(f"{who.instance_type} does not support EFA")
        result = ctx.host.run(fi_info.COMMANDS[0])
        if result.missing:  # the EFA installer puts it in /opt/amazon/efa/bin, often not on PATH
            result = ctx.host.run(fi_info.COMMANDS[1])
        base = {"host": ctx.host.name, **who.evidence(), "command": " ".join(result.argv), "expected_devices": expected}
        resource = node_resource(ctx, "efa")
        if result.missing:
            if expected is None:
                ctx.unverified("the EFA provider of this node (fi_info is not installed and the instance type is "
                               "unknown)", code="NotInstalled")
                return []
            return [self.finding(resource, (
                f"fi_info is not installed on {ctx.host.name} ({who.instance_type}, up to {expected} EFA "
                "interfaces): the EFA software (libfabric, aws-ofi-nccl) is missing, so NCCL runs over TCP."),
                {**base, "searched": [argv[0] for argv in fi_info.COMMANDS]})]
        provider = fi_info.parse(result.stdout) if result.ok else fi_info.Provider()
        if not provider.devices:
            return [self.finding(resource, (
                f"libfabric on {ctx.host.name} has no EFA provider ({first_line(result)}): no EFA interface is "
                "attached or the EFA driver is not loaded, so NCCL runs over TCP."),
                {**base, "devices": 0, "error": first_line(result), "exit_status": result.returncode})]
        evidence = {**base, "devices": len(provider.devices), "device_names": provider.devices,
                    "endpoint_types": provider.endpoint_types, "provider_versions": provider.versions}
        if not provider.rdm:
            return [self.finding(resource, (
                f"The EFA provider on {ctx.host.name} offers no FI_EP_RDM endpoint, the one NCCL's aws-ofi-nccl "
                "plugin needs; update the EFA software."), evidence)]
        if expected is None:
            unknown_type(ctx, who, "EFA device")
        if expected and len(provider.devices) < expected:
            return [self.finding(resource, (
                f"{ctx.host.name} sees {len(provider.devices)} of the {expected} EFA devices a {who.instance_type} "
                "supports: it has a fraction of its network bandwidth for collectives."), evidence,
                severity=Severity.WARNING)]
        return []
