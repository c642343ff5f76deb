from __future__ import annotations

from fmdoctor.engine.check import Check, NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.node import fi_info
from fmdoctor.node.instance_facts import efa_capable

from ._node import NodeIdentity, efa_devices, first_line, identity, node_resource, pci_gpus, type_name, unknown_type


class NodeEfaProvider(Check):
    """On this node libfabric's EFA provider is installed and answers (fi_info -p efa), offers the RDM endpoint
    NCCL uses, and sees every EFA device attached to the node and as many as the instance type supports.

    Without it NCCL silently falls back to TCP sockets: training runs, only many times slower. Which types support
    EFA, and how many, is AWS's (EFA guide, "Supported instance types"; one EFA per network card): a type that
    cannot have EFA is never told it lacks it. P and Trn training types must carry every EFA they support; on other
    EFA-capable types (G, HPC, CPU) EFA is optional, so a node with no EFA device attached is not judged. For a type
    fmdoctor does not know, the EFA devices the node lists in /sys/class/infiniband are the expected count.
    """

    id = "node-efa-provider"
    family = "efa"
    concerns = frozenset({NODE})
    severity = Severity.CRITICAL
    iam_actions = ()
    targets = frozenset({"node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        who = identity(ctx)
        attached = efa_devices(ctx)
        expected, expected_from = self._expected(ctx, who, attached)
        result = ctx.host.run(fi_info.COMMANDS[0])
        if result.missing:  # the EFA installer puts it in /opt/amazon/efa/bin, often not on PATH
            result = ctx.host.run(fi_info.COMMANDS[1])
        base = {"host": ctx.host.name, **who.evidence(), "command": " ".join(result.argv), "expected_devices": expected,
                "expected_from": expected_from, "attached_devices": attached}
        resource = node_resource(ctx, "efa")
        # EFA is optional on this type and /sys could not say whether any is attached: no provider is no verdict.
        optional = who.facts is not None and not who.facts.efa_expected and attached is None
        if optional and (result.missing or not result.ok):
            ctx.unverified("whether this node uses EFA (optional on its type; /sys/class/infiniband could not be read)",
                           code="EfaAttachmentUnknown", message=f"{' '.join(result.argv)}: {first_line(result)}")
            return []
        if result.missing:
            if not expected:
                ctx.unverified("the EFA provider of this node (fi_info is not installed and neither the instance "
                               "type nor /sys/class/infiniband says how many EFA devices it has)", code="NotInstalled")
                return []
            return [self.finding(resource, (
                f"fi_info is not installed on {ctx.host.name} ({type_name(who)}, {expected} EFA devices by its "
                f"{expected_from}): the EFA software (libfabric, aws-ofi-nccl) is missing, so NCCL runs over TCP."),
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
                f"{ctx.host.name} sees {len(provider.devices)} of the {expected} EFA devices its {expected_from} "
                f"says it has ({type_name(who)}): it has a fraction of its network bandwidth for collectives."),
                evidence, severity=Severity.WARNING)]
        return []

    @staticmethod
    def _expected(ctx: CheckContext, who: NodeIdentity, attached: list[str] | None) -> tuple[int | None, str | None]:
        """The EFA devices this node should have and who says so; NotApplicable where EFA does not apply."""
        facts = who.facts
        if facts is not None:
            if facts.max_efa_interfaces == 0 and not attached:
                raise NotApplicable(f"{who.instance_type} does not support EFA")
            if not facts.efa_expected and attached == []:
                raise NotApplicable(f"no EFA device is attached to {ctx.host.name} and EFA is optional on a "
                                    f"{who.instance_type}")
            if facts.max_efa_interfaces is not None:
                return facts.max_efa_interfaces, "instance type"
            ctx.unverified(f"whether every EFA interface a {who.instance_type} supports is attached",
                           code="EfaCountUndocumented", message="AWS documents its network cards but not how many "
                           "carry EFA; the attached EFA devices are compared with the provider instead")
            return (len(attached), "/sys/class/infiniband") if attached else (None, None)
        if attached:
            return len(attached), "/sys/class/infiniband"
        if attached == []:
            if efa_capable(who.instance_type) is False:
                raise NotApplicable(f"{who.instance_type} is not among the instance types AWS lists as supporting "
                                    "EFA, and no EFA device is attached")
            if pci_gpus(ctx) == []:
                raise NotApplicable(f"no EFA device is attached to {ctx.host.name} ({type_name(who)}) and it has no "
                                    "NVIDIA GPU: a CPU node need not use EFA")
            ctx.unverified(f"whether {ctx.host.name} ({type_name(who)}) should carry EFA", code="UnknownInstanceType",
                           message="no EFA device is attached, and fmdoctor does not know how many this instance "
                                   "type supports")
            raise Unverified("EFA expectation unknown")
        elif efa_capable(who.instance_type) is False:
            raise NotApplicable(f"{who.instance_type} is not among the instance types AWS lists as supporting EFA")
        return None, None
