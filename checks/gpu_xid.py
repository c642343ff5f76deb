from __future__ import annotations

from datetime import datetime

from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.entities import NODE
from fmdoctor.engine.model import Finding, Severity
from fmdoctor.node import kernel_log, nvidia_smi
from fmdoctor.node.xid import ALWAYS_FATAL_SXIDS, SxidEvent, XidEvent, parse_kernel_log, parse_sxid_log
from fmdoctor.node.xid_catalogue import CATALOGUE_URL, XidVerdict, solo_xid_45

from ._node import node_resource, nvidia_identity, run_nvidia_smi

SXID_FATAL_TEXT = ("drain the node and reset all GPUs and NVSwitches (reboot the node); replace it if it recurs "
                   "(Fabric Manager user guide, fatal NVSwitch SXid errors)")


class GpuXid(Check):
    """This boot's kernel log holds no NVIDIA Xid whose immediate action in NVIDIA's Xid catalogue needs the GPU
    reset, the node or instance restarted, a hardware or driver check or support, no fatal NVSwitch SXid, and no
    application-level Xid (restart the app) within gpu.xid_lookback.

    Each Xid is judged by NVIDIA's Xid catalogue kept as data (fmdoctor/node/data/xid_catalogue.csv, from
    https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html): RESET_GPU, RESTART_BM, RESTART_VM,
    CONTACT_SUPPORT and the check buckets are critical, RESTART_APP a warning, IGNORE info. SXids follow the
    Fabric Manager user guide: a line marked Fatal (or an always-fatal SXid) needs the GPUs and NVSwitches reset.
    """

    id = "gpu-xid"
    family = "gpu"
    concerns = frozenset({NODE})
    severity = Severity.CRITICAL
    iam_actions = ()
    targets = frozenset({"node"})

    def run(self, ctx: CheckContext) -> list[Finding]:
        who = nvidia_identity(ctx)
        log = kernel_log.read_kernel_log(ctx.host, ctx.now)
        if log.source is None:
            ctx.unverified("NVIDIA Xid errors in this boot's kernel log", code="KernelLogUnreadable",
                           message="; ".join(log.attempts) + " (run fmdoctor as root to read the kernel log)")
            return []
        boot = log.boot_time or kernel_log.boot_time(ctx.host, ctx.now)
        lookback = ctx.settings.gpu.xid_lookback
        since = ctx.now - lookback

        def current(time: datetime | None, standing: bool) -> bool:
            """This boot's, and (unless a reset or reboot is what clears it) within the lookback."""
            if log.boot_time is not None and time is not None and time < log.boot_time:
                return False
            return standing or time is None or time >= since

        by_pci: dict[str, list[XidEvent]] = {}
        for event in parse_kernel_log(log.text, ctx.now, boot):
            if current(event.time, event.verdict.severity is Severity.CRITICAL):
                by_pci.setdefault(event.pci, []).append(event)
        by_switch: dict[str, list[SxidEvent]] = {}
        for sxid in parse_sxid_log(log.text, ctx.now, boot):
            if current(sxid.time, _sxid_fatal(sxid)):
                by_switch.setdefault(sxid.pci, []).append(sxid)
        indexes = _gpu_indexes(ctx) if by_pci else {}
        source = {"source": log.source, "lookback": format_duration(lookback), "host": ctx.host.name,
                  "catalogue": CATALOGUE_URL, **who.evidence()}
        findings = [self._gpu_finding(ctx, pci, found, indexes.get(nvidia_smi.pci_key(pci)), source)
                    for pci, found in sorted(by_pci.items())]
        findings += [self._switch_finding(ctx, pci, found, source) for pci, found in sorted(by_switch.items())]
        return findings

    def _gpu_finding(self, ctx: CheckContext, pci: str, events: list[XidEvent], index: int | None,
                     source: dict[str, str | None]) -> Finding:
        groups: dict[int, list[XidEvent]] = {}
        for event in events:
            groups.setdefault(event.xid, []).append(event)
        verdicts = {xid: group[-1].verdict for xid, group in groups.items()}
        if set(groups) == {45}:  # the catalogue: Xid 45 alone points at Fabric Manager, not at another Xid
            verdicts[45] = solo_xid_45()
        order = sorted(groups, key=lambda xid: (tuple(-r for r in verdicts[xid].rank), xid))
        worst, worst_events = verdicts[order[0]], groups[order[0]]
        gpu = f"GPU {index} ({pci})" if index is not None else f"The GPU at {pci}"
        others = f" and {len(order) - 1} other Xid{'s' if len(order) > 2 else ''}" if len(order) > 1 else ""
        last = worst_events[-1].time
        when = f", last at {last.isoformat(timespec='seconds')}" if last else ""
        return self.finding(
            node_resource(ctx, pci),
            (f"{gpu} on {ctx.host.name} logged Xid {worst.code} ({_name(worst)}) {len(worst_events)}x{when}{others}; "
             f"NVIDIA's catalogue: {worst.resolution or 'no immediate action listed'}: {worst.action_text}."),
            {
                "pci": pci,
                "action": worst.action,
                "resolution": worst.resolution,
                "xids": [_xid_evidence(groups[xid], verdicts[xid]) for xid in order],
                "gpu_index": index,
                **source,
            },
            severity=worst.severity,
        )

    def _switch_finding(self, ctx: CheckContext, pci: str, events: list[SxidEvent],
                        source: dict[str, str | None]) -> Finding:
        fatal = [e for e in events if _sxid_fatal(e)]
        shown = fatal or events
        codes = sorted({e.sxid for e in shown})
        what = "fatal" if fatal else "non-fatal"
        action = SXID_FATAL_TEXT if fatal else "no action unless a fatal SXid or an Xid 74 follows"
        return self.finding(
            node_resource(ctx, pci),
            (f"NVSwitch {events[0].switch} ({pci}) on {ctx.host.name} logged {len(shown)} {what} SXid "
             f"{', '.join(map(str, codes))} (last: {shown[-1].message[:120]}): {action}."),
            {
                "pci": pci,
                "nvswitch": events[0].switch,
                "action": "reset-fabric" if fatal else "monitor",
                "sxids": [{"sxid": e.sxid, "fatal": _sxid_fatal(e),
                           "time": e.time.isoformat(timespec="seconds") if e.time else None,
                           "example": e.line[-240:]} for e in shown[-20:]],
                **source,
            },
            severity=Severity.CRITICAL if fatal else Severity.INFO,
        )


def _name(verdict: XidVerdict) -> str:
    if not verdict.in_catalogue:
        return "not in NVIDIA's catalogue"
    return f"{verdict.mnemonic}: {verdict.description}" if verdict.description != "Unused" else verdict.mnemonic


def _xid_evidence(events: list[XidEvent], verdict: XidVerdict) -> dict[str, object]:
    first, last = events[0], events[-1]
    return {"xid": verdict.code, "name": verdict.mnemonic, "meaning": verdict.description,
            "resolution": verdict.resolution, "action": verdict.action, "severity": verdict.severity.value,
            "applies_to": list(verdict.applies_to), "count": len(events),
            "first": first.time.isoformat(timespec="seconds") if first.time else None,
            "last": last.time.isoformat(timespec="seconds") if last.time else None,
            "process": last.process, "example": last.line[-240:]}


def _sxid_fatal(event: SxidEvent) -> bool:
    return bool(event.fatal) or event.sxid in ALWAYS_FATAL_SXIDS


def _gpu_indexes(ctx: CheckContext) -> dict[str, int]:
    """PCI bus -> GPU index from nvidia-smi, when it runs; a GPU that fell off the bus is not in it."""
    result = run_nvidia_smi(ctx)
    if not result.ok:
        return {}
    return {nvidia_smi.pci_key(g.pci_bus_id): g.index for g in nvidia_smi.parse(result.stdout).gpus}
