from __future__ import annotations

from typing import Any

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.node import gpu_memory, neuron, nvidia_smi, sysfs

from ._node import (
    NodeIdentity,
    first_line,
    identity,
    node_resource,
    nvidia_identity,
    pci_gpus,
    run_memory_query,
    run_nvidia_smi,
    type_name,
    unknown_type,
)


class NodeGpuHealth(Check):
    """On this node the accelerator driver answers and sees every GPU (nvidia-smi) or Neuron device (neuron-ls) the
    instance type has, and no GPU reports uncorrectable ECC errors, a lost state, a failed or pending row remap,
    pages pending retirement, or memory at or above gpu.memory_pressure_percent.

    The expected count is the instance type's (AWS's accelerated-computing specifications); for a type fmdoctor does
    not know, the node's own PCI bus (NVIDIA GPUs in /sys/bus/pci) or, failing that, the GPUs the NVIDIA driver
    bound. Row remapping and page retirement follow NVIDIA's GPU memory error management guide: a failed remap is
    the RMA criterion (replace the GPU), a pending remap needs a reset at the next window, pending retired pages a
    driver reload.
    """

    id = "node-gpu-health"
    family = "gpu"
    concerns = frozenset({NODE})
    severity = Severity.CRITICAL
    iam_actions = ()
    targets = frozenset({"node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        who = identity(ctx)
        if who.facts and who.facts.neuron_devices:
            return self._neuron(ctx, who, who.facts.neuron_devices)
        who = nvidia_identity(ctx)
        expected, expected_from = _expected_gpus(ctx, who)
        result = run_nvidia_smi(ctx)
        base = {"host": ctx.host.name, **who.evidence(), "command": " ".join(nvidia_smi.COMMAND),
                "expected_from": expected_from}
        if result.missing:
            if expected is None:
                ctx.unverified("NVIDIA GPU health of this node (nvidia-smi is not installed, and neither the instance "
                               "type nor the node's PCI bus says how many GPUs it has)", code="NotInstalled")
                return []
            return [self.finding(node_resource(ctx), (
                f"nvidia-smi is not installed on {ctx.host.name} ({type_name(who)}, {expected} GPUs by its "
                f"{expected_from}): the NVIDIA driver is missing, so no job can use its GPUs."),
                {**base, "expected_gpus": expected})]
        if result.timed_out:
            return [self.finding(node_resource(ctx), (
                f"nvidia-smi did not answer on {ctx.host.name}: the driver is stuck, usually on a GPU that fell off "
                "the bus; check gpu-xid and reboot the node."), {**base, "error": result.stderr})]
        parsed = nvidia_smi.parse(result.stdout)
        if not result.ok and not parsed.gpus:
            return [self.finding(node_resource(ctx), (
                f"nvidia-smi fails on {ctx.host.name} ({first_line(result)}): the driver cannot reach the GPUs."),
                {**base, "error": first_line(result), "exit_status": result.returncode})]
        findings = []
        if expected is None:
            unknown_type(ctx, who, "GPU")
        lost = [g for g in parsed.gpus if g.lost]
        if (expected and len(parsed.gpus) < expected) or parsed.unreadable or lost:
            seen = len(parsed.gpus) - len(lost)
            findings.append(self.finding(node_resource(ctx), (
                f"{ctx.host.name} sees {seen} working GPU{'s' if seen != 1 else ''}"
                f"{f' of its {expected}' if expected else ''}: a GPU the driver lost needs a node reboot (check "
                "gpu-xid for Xid 79) before it can rejoin a job."), {
                **base, "gpus_seen": len(parsed.gpus), "expected_gpus": expected,
                "lost": [{"index": g.index, "pci_bus_id": g.pci_bus_id, "state": g.lost} for g in lost],
                "unreadable": parsed.unreadable,
            }))
        memory = _memory_state(ctx) if parsed.gpus else {}
        for gpu in parsed.gpus:
            finding = self._gpu_finding(ctx, gpu, memory.get(nvidia_smi.pci_key(gpu.pci_bus_id)), base)
            if finding:
                findings.append(finding)
        return findings

    def _gpu_finding(self, ctx: CheckContext, gpu: nvidia_smi.GpuRow, memory: gpu_memory.GpuMemory | None,
                     base: dict[str, Any]) -> Finding | None:
        threshold = ctx.settings.gpu.memory_pressure_percent
        problems: list[tuple[Severity, str, str]] = []  # (severity, action, text)
        if memory and memory.remap_failure:
            problems.append((Severity.CRITICAL, "replace", "a failed row remap (no spare rows left, NVIDIA's RMA "
                                                          "criterion): drain the node and replace it"))
        if gpu.ecc_uncorrected:
            problems.append((Severity.CRITICAL, "reset", f"{gpu.ecc_uncorrected} uncorrectable ECC errors since the "
                                                         "driver loaded (drain the node and reset the GPU)"))
        if memory and memory.remap_pending:
            problems.append((Severity.WARNING, "reset", "a row remap pending until the GPU is reset (reset it at the "
                                                        "next drain window)"))
        if memory and memory.retirement_pending:
            problems.append((Severity.WARNING, "reboot", "memory pages pending retirement until the driver reloads "
                                                         "(reboot at the next drain window)"))
        if gpu.memory_percent is not None and gpu.memory_percent >= threshold:
            problems.append((Severity.WARNING, "free-memory", f"{gpu.memory_percent:.1f}% of its memory in use "
                                                              f"({gpu.memory_used:g} of {gpu.memory_total:g} MiB)"))
        if not problems:
            return None
        problems.sort(key=lambda p: -p[0].rank)
        return self.finding(node_resource(ctx, f"gpu/{gpu.index}"),
            f"GPU {gpu.index} ({gpu.pci_bus_id}) on {ctx.host.name} has {'; '.join(p[2] for p in problems)}.", {
                "gpu_index": gpu.index, "pci_bus_id": gpu.pci_bus_id, "ecc_uncorrected": gpu.ecc_uncorrected,
                "memory_percent": None if gpu.memory_percent is None else round(gpu.memory_percent, 1),
                "utilization_percent": gpu.utilization, "temperature_c": gpu.temperature, "uuid": gpu.uuid,
                "name": gpu.name, "memory_pressure_percent": threshold, "action": problems[0][1],
                "remapped_rows": _remap_evidence(memory), "retired_pages": _retired_evidence(memory), **base,
            }, severity=problems[0][0])

    def _neuron(self, ctx: CheckContext, who: NodeIdentity, expected: int) -> list[Finding]:
        result = ctx.host.run(neuron.COMMANDS[0])
        if result.missing:
            result = ctx.host.run(neuron.COMMANDS[1])
        devices = neuron.parse(result.stdout) if result.ok else None
        source = " ".join(result.argv)
        count = len(devices) if devices is not None else None
        if count is None:
            nodes = neuron.device_nodes(ctx.host.list_dir("/dev"))
            source = "/dev/neuron*"
            if nodes is None:
                ctx.unverified(f"how many Neuron devices {ctx.host.name} sees", code="NotInstalled",
                               message=f"neuron-ls: {first_line(result)}; /dev could not be listed")
                return []
            count = len(nodes)
        if count >= expected:
            return []
        return [self.finding(node_resource(ctx), (
            f"{ctx.host.name} sees {count} of the {expected} Neuron devices a {who.instance_type} has: reboot the "
            "node; if a device is still missing, stop and start the instance (new host) or replace it."),
            {"host": ctx.host.name, **who.evidence(), "command": source, "neuron_devices_seen": count,
             "expected_neuron_devices": expected, "expected_from": "instance type",
             "device_bdfs": [d.bdf for d in devices or []]})]


def _expected_gpus(ctx: CheckContext, who: NodeIdentity) -> tuple[int | None, str | None]:
    if who.facts:
        return who.facts.gpus, "instance type"
    on_pci = pci_gpus(ctx)
    if on_pci:
        return len(on_pci), "PCI bus"
    bound = ctx.shared("node.driver-gpus", lambda: sysfs.driver_gpus(ctx.host))
    if bound:
        return len(bound), "NVIDIA driver"
    return None, None


def _memory_state(ctx: CheckContext) -> dict[str, gpu_memory.GpuMemory]:
    """Row remapping / retired pages per GPU (by PCI key); what could not be read is recorded as not verified."""
    result = run_memory_query(ctx)
    rows = gpu_memory.parse(result.stdout) if result.ok else []
    if not rows:
        ctx.unverified("row remapping and retired pages of the GPUs", code="MemoryErrorsUnreadable",
                       message=f"{' '.join(gpu_memory.COMMAND)}: "
                               f"{first_line(result) if not result.ok else 'printed no GPU section'}")
        return {}
    unread = [r.bus_id for r in rows if not r.read]
    if unread:
        ctx.unverified(f"row remapping and retired pages of GPU {', '.join(unread)}", code="MemoryErrorsNotReported",
                       message="nvidia-smi reports N/A for both (MIG mode with active instances hides them)")
    return {nvidia_smi.pci_key(r.bus_id): r for r in rows if r.read}


def _remap_evidence(memory: gpu_memory.GpuMemory | None) -> dict[str, Any] | None:
    if memory is None or memory.remap_pending is None:
        return None
    return {"correctable": memory.remapped_correctable, "uncorrectable": memory.remapped_uncorrectable,
            "pending": memory.remap_pending, "failure": memory.remap_failure}


def _retired_evidence(memory: gpu_memory.GpuMemory | None) -> dict[str, Any] | None:
    if memory is None or memory.retirement_pending is None:
        return None
    return {"single_bit_ecc": memory.retired_single_bit, "double_bit_ecc": memory.retired_double_bit,
            "pending": memory.retirement_pending}
