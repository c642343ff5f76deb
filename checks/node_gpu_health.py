from __future__ import annotations

from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.node import nvidia_smi

from ._node import first_line, node_resource, nvidia_identity, run_nvidia_smi, unknown_type


class NodeGpuHealth(Check):
    """On this node nvidia-smi answers, sees every GPU the instance type has, and no GPU reports uncorrectable
    ECC errors, a lost state or memory at or above gpu.memory_pressure_percent.

    A GPU the driver no longer lists, or nvidia-smi hanging or failing, takes the node out of any
    collective; uncorrectable ECC errors corrupt results until the GPU is reset.
    """

    id = "node-gpu-health"
    family = "gpu"
    severity = Severity.CRITICAL
    iam_actions = ()
    targets = frozenset({"node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        who = nvidia_identity(ctx)
        expected = who.facts.gpus if who.facts else None
        result = run_nvidia_smi(ctx)
        base = {"host": ctx.host.name, **who.evidence(), "command": " ".join(nvidia_smi.COMMAND)}
        if result.missing:
            if expected is None:
                ctx.unverified("NVIDIA GPU health of this node (nvidia-smi is not installed and the instance type "
                               "is unknown)", code="NotInstalled")
                return []
            return [self.finding(node_resource(ctx), (
                f"nvidia-smi is not installed on {ctx.host.name}, a {who.instance_type} with {expected} GPUs: the "
                "NVIDIA driver is missing, so no job can use its GPUs."), {**base, "expected_gpus": expected})]
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
        threshold = ctx.settings.gpu.memory_pressure_percent
        for gpu in parsed.gpus:
            problems, severity = [], Severity.WARNING
            if gpu.ecc_uncorrected:
                problems.append(f"{gpu.ecc_uncorrected} uncorrectable ECC errors since the driver loaded "
                                "(drain the node and reset the GPU)")
                severity = Severity.CRITICAL
            if gpu.memory_percent is not None and gpu.memory_percent >= threshold:
                problems.append(f"{gpu.memory_percent:.1f}% of its memory in use ({gpu.memory_used:g} of "
                                f"{gpu.memory_total:g} MiB)")
            if not problems:
                continue
            findings.append(self.finding(node_resource(ctx, f"gpu/{gpu.index}"),
                f"GPU {gpu.index} ({gpu.pci_bus_id}) on {ctx.host.name} has {'; '.join(problems)}.", {
                    "gpu_index": gpu.index, "pci_bus_id": gpu.pci_bus_id, "ecc_uncorrected": gpu.ecc_uncorrected,
                    "memory_percent": None if gpu.memory_percent is None else round(gpu.memory_percent, 1),
                    "utilization_percent": gpu.utilization, "temperature_c": gpu.temperature, "uuid": gpu.uuid,
                    "name": gpu.name, "memory_pressure_percent": threshold, **base,
                }, severity=severity))
        return findings
