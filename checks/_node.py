"""What the on-node checks share: the node's identity from IMDS, what its own kernel lists (sysfs), and one run of
each nvidia-smi query per fmdoctor run."""

from __future__ import annotations

from dataclasses import dataclass

from fmdoctor.engine.check import NotApplicable
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.host import CommandResult, ImdsUnavailable
from fmdoctor.node import gpu_memory, nvidia_smi, sysfs
from fmdoctor.node.instance_facts import TypeFacts, facts_for


@dataclass(frozen=True)
class NodeIdentity:
    instance_type: str | None
    instance_id: str | None
    facts: TypeFacts | None  # None when the type is unknown (or IMDS unreachable)

    def evidence(self) -> dict[str, str | None]:
        return {"instance_type": self.instance_type, "instance_id": self.instance_id}


def identity(ctx: CheckContext) -> NodeIdentity:
    def load() -> NodeIdentity:
        try:
            instance_type = ctx.host.imds("latest/meta-data/instance-type")
            instance_id = ctx.host.imds("latest/meta-data/instance-id")
        except ImdsUnavailable:
            instance_type = instance_id = None
        instance_type = instance_type.strip() if instance_type else None
        return NodeIdentity(instance_type, instance_id.strip() if instance_id else None, facts_for(instance_type))

    return ctx.shared("node.identity", load)


def unknown_type(ctx: CheckContext, who: NodeIdentity, what: str) -> None:
    """Say that a count could not be compared: IMDS named no type we know (or answered something else), and the
    node's own listing (/sys) could not be read either."""
    answered = repr(who.instance_type[:60]) if who.instance_type else "nothing"
    ctx.unverified(f"whether {ctx.host.name} sees every {what} of its instance type", code="UnknownInstanceType",
                   message=f"IMDS latest/meta-data/instance-type answered {answered}, not a type whose {what} count "
                           "fmdoctor knows, and /sys could not be read to count them")


def nvidia_identity(ctx: CheckContext) -> NodeIdentity:
    """The node's identity; NotApplicable when its known instance type has no NVIDIA GPUs, or, for a type fmdoctor
    does not know, when the node's PCI bus (which it could read) has none."""
    who = identity(ctx)
    if who.facts and not who.facts.gpus:
        raise NotApplicable(f"{who.instance_type} has no NVIDIA GPUs")
    if who.facts is None and pci_gpus(ctx) == []:
        raise NotApplicable(f"no NVIDIA GPU on the PCI bus of {ctx.host.name} ({type_name(who)})")
    return who


def type_name(who: NodeIdentity) -> str:
    return who.instance_type[:60] if who.instance_type else "instance type unknown"


def pci_gpus(ctx: CheckContext) -> list[str] | None:
    """NVIDIA GPUs the node's PCI bus lists; None when /sys could not be read."""
    return ctx.shared("node.pci-gpus", lambda: sysfs.nvidia_gpus_on_pci(ctx.host))


def efa_devices(ctx: CheckContext) -> list[str] | None:
    return ctx.shared("node.efa-devices", lambda: sysfs.efa_devices(ctx.host))


def run_nvidia_smi(ctx: CheckContext) -> CommandResult:
    return ctx.shared("node.nvidia-smi", lambda: ctx.host.run(nvidia_smi.COMMAND))


def run_memory_query(ctx: CheckContext) -> CommandResult:
    return ctx.shared("node.nvidia-smi-memory", lambda: ctx.host.run(gpu_memory.COMMAND))


def node_resource(ctx: CheckContext, part: str = "") -> str:
    return f"node/{ctx.host.name}" + (f"/{part}" if part else "")


def first_line(result: CommandResult) -> str:
    lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
    return lines[0] if lines else f"exit status {result.returncode}"
