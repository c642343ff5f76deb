from __future__ import annotations

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.node import nvidia_smi
from fmdoctor.node.kernel_log import read_kernel_log
from fmdoctor.node.xid import ACTION_RANK, ACTION_TEXT, MONITOR, RESET, RESTART_APP, XidEvent, parse_kernel_log

from ._node import node_resource, nvidia_identity, run_nvidia_smi

SEVERITY = {MONITOR: Severity.INFO, RESTART_APP: Severity.WARNING}  # reset, reboot, isolate: critical


class GpuXid(Check):
    """This boot's kernel log holds no NVIDIA Xid error that needs the GPU reset, the node rebooted or the GPU
    replaced, and no application-level Xid (restart or monitor) within gpu.xid_lookback.

    Each Xid is classified by NVIDIA's Xid catalogue into the action it needs: 79 (fallen off the bus) a
    reboot, 48/63/74/95 a GPU reset, 64 taking the GPU out of service, 13/31/43/94 an application restart.
    """

    id = "gpu-xid"
    family = "gpu"
    severity = Severity.CRITICAL
    iam_actions = ()
    targets = frozenset({"node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        who = nvidia_identity(ctx)
        log = read_kernel_log(ctx.host, ctx.now)
        if log.source is None:
            ctx.unverified("NVIDIA Xid errors in this boot's kernel log", code="KernelLogUnreadable",
                           message="; ".join(log.attempts) + " (run fmdoctor as root to read the kernel log)")
            return []
        lookback = ctx.settings.gpu.xid_lookback
        events = [e for e in parse_kernel_log(log.text, ctx.now)
                  if log.boot_time is None or e.time is None or e.time >= log.boot_time]
        # Reset/reboot/isolate Xids stand until the GPU is reset or the node rebooted; application-level ones fade.
        events = [e for e in events if ACTION_RANK[e.action] >= ACTION_RANK[RESET]
                  or e.time is None or e.time >= ctx.now - lookback]
        by_pci: dict[str, list[XidEvent]] = {}
        for event in events:
            by_pci.setdefault(event.pci, []).append(event)
        indexes = _gpu_indexes(ctx)
        source = {"source": log.source, "lookback": format_duration(lookback), "host": ctx.host.name,
                  **who.evidence()}
        return [self._finding(ctx, pci, found, indexes.get(nvidia_smi.pci_key(pci)), source)
                for pci, found in sorted(by_pci.items())]

    def _finding(self, ctx: CheckContext, pci: str, events: list[XidEvent], index: int | None,
                 source: dict[str, str | None]) -> Finding:
        groups: dict[int, list[XidEvent]] = {}
        for event in events:
            groups.setdefault(event.xid, []).append(event)
        xids = sorted(groups.values(), key=lambda g: (-ACTION_RANK[g[-1].action], g[0].xid))
        worst = xids[0][-1]
        action = worst.action
        gpu = f"GPU {index} ({pci})" if index is not None else f"The GPU at {pci}"
        others = f" and {len(xids) - 1} other Xid{'s' if len(xids) > 2 else ''}" if len(xids) > 1 else ""
        when = f", last at {worst.time.isoformat(timespec='seconds')}" if worst.time else ""
        return self.finding(
            node_resource(ctx, pci),
            (f"{gpu} on {ctx.host.name} logged Xid {worst.xid} ({worst.info.meaning}) "
             f"{len(xids[0])}x{when}{others}: {ACTION_TEXT[action]}."),
            {
                "pci": pci,
                "action": action,
                "xids": [
                    {"xid": g[0].xid, "meaning": g[0].info.meaning, "action": g[-1].action, "count": len(g),
                     "first": g[0].time.isoformat(timespec="seconds") if g[0].time else None,
                     "last": g[-1].time.isoformat(timespec="seconds") if g[-1].time else None,
                     "process": g[-1].process, "example": g[-1].line[-240:]}
                    for g in xids
                ],
                "gpu_index": index,
                **source,
            },
            severity=SEVERITY.get(action, Severity.CRITICAL),
        )


def _gpu_indexes(ctx: CheckContext) -> dict[str, int]:
    """PCI bus -> GPU index from nvidia-smi, when it runs; a GPU that fell off the bus is not in it."""
    result = run_nvidia_smi(ctx)
    if not result.ok:
        return {}
    return {nvidia_smi.pci_key(g.pci_bus_id): g.index for g in nvidia_smi.parse(result.stdout).gpus}
