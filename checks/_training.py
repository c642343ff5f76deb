"""What ``training-stalled`` reads besides the logs: checkpoint progress, the GPUs' and EFA's activity,
flight-recorder dumps from S3, and what the other checks know about a suspect node (an Xid in its kernel log
lines, EFA error counters, a Spot interruption, its HyperPod status)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fmdoctor.checkpoints.facts import checkpoint_facts
from fmdoctor.checkpoints.fsx import resolve_fsx
from fmdoctor.durations import format_duration
from fmdoctor.engine.check import Check
from fmdoctor.engine.context import CheckContext
from fmdoctor.engine.errors import describe_aws_failure
from fmdoctor.engine.gaps import Gaps
from fmdoctor.engine.inventory import Instance
from fmdoctor.engine.safe_files import BoundedReader, FileRefused
from fmdoctor.metrics.dcgm import EFA_THROUGHPUT_COUNTERS
from fmdoctor.metrics.model import POWER, SM_CLOCK, TENSOR_ACTIVE
from fmdoctor.node.xid import parse_kernel_log
from fmdoctor.node.xid_catalogue import ACTION_ORDER
from fmdoctor.spot.sources import SHARED_KEY as SPOT_KEY
from fmdoctor.spot.sources import load_spot_facts
from fmdoctor.training.culprit import NodeKeys
from fmdoctor.training.flight_recorder import (
    MAX_DUMP_BYTES,
    DumpError,
    RankDump,
    is_dump_name,
    load_dump,
    parse_dump,
    rank_of,
)
from fmdoctor.training.logs import LogEvent

from ._common import hyperpod_nodes_of
from ._gpu import cluster_metrics
from ._spot import interruptions

MAX_DUMPS = 4096
MAX_DUMPS_TOTAL_BYTES = 512 * 1024 * 1024  # every rank's dump together (4096 ranks of a real dump: ~100 MiB)


@dataclass(frozen=True)
class Progress:
    """The newest checkpoint a restart could resume from, and whether it came later than the job's habit."""

    location: str
    uri: str
    step: int | None
    written: datetime
    age: timedelta
    interval: timedelta | None  # between the two newest saves; None with a single checkpoint
    threshold: timedelta
    stale: bool

    def evidence(self) -> dict[str, Any]:
        return {"location": self.location, "newest_usable": self.uri, "step": self.step,
                "written": self.written.isoformat(timespec="seconds"), "age": format_duration(self.age),
                "usual_interval": format_duration(self.interval) if self.interval else None,
                "stalled_after": format_duration(self.threshold)}


def checkpoint_progress(ctx: CheckContext) -> Progress | None:
    """None when no checkpoint location is configured or none could be read (the gaps say why)."""
    settings = ctx.settings
    if not settings.checkpoints.locations or ctx.scope.aws is None:
        return None
    facts = checkpoint_facts(ctx)
    facts.gaps.report(ctx)
    picked = facts.newest_usable()
    if picked is None:
        return None
    scan, checkpoint = picked
    interval = None
    if scan.newest is not None and scan.previous is not None:
        interval = max(scan.newest.last_modified - scan.previous.last_modified, settings.training.min_interval)
    threshold = interval * settings.training.interval_factor if interval else settings.checkpoints.max_age
    age = max(ctx.now - checkpoint.last_modified, timedelta(0))
    return Progress(scan.location, checkpoint.uri, checkpoint.step, checkpoint.last_modified, age, interval,
                    threshold, age > threshold)


@dataclass(frozen=True)
class Activity:
    """The job's nodes in the run's metrics window: whose GPUs spin (busy without tensor work) and how many RDMA
    bytes their EFA devices moved (None where no node publishes EFA throughput counters)."""

    judged: list[str]  # nodes busy at or above gpu.idle_percent that publish tensor activity
    spinning: dict[str, dict[str, float | None]]  # node -> utilization, tensor activity, power, SM clock
    rdma_bytes: float | None
    window: str

    @property
    def stalled(self) -> bool:
        """Every judged node spins and (where EFA throughput is published) nothing crossed the network."""
        return bool(self.judged) and len(self.spinning) == len(self.judged) and not self.rdma_bytes

    def evidence(self) -> dict[str, Any]:
        return {"window": self.window, "nodes_judged": len(self.judged), "spinning": self.spinning,
                "rdma_bytes": self.rdma_bytes}


def job_activity(ctx: CheckContext) -> Activity | None:
    """What the GPU metrics say, or None when no node's tensor activity is published (or none could be read).

    NCCL's kernels keep waiting on a peer that never arrives, so a hung collective shows as utilization (a kernel
    ran: nvidia-smi utilization.gpu, DCGM_FI_DEV_GPU_UTIL) with the tensor pipes idle
    (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE at or under gpu.no_tensor_work_percent), on every rank at once, while the
    EFA devices carry no RDMA bytes (the EFA exporter's node_amazonefa_rdma_read_bytes/_write_bytes). Power and
    SM clock are quoted where published. Reported by the GPU checks when missing; never an error of this check."""
    try:
        metrics = cluster_metrics(ctx)
    except Exception:
        return None
    gpu = ctx.settings.gpu
    judged, spinning = [], {}
    for node_id, node in metrics.nodes.items():
        utilization, tensor = node.utilization, node.mean(TENSOR_ACTIVE)
        if utilization is None or tensor is None or utilization < gpu.idle_percent:
            continue
        judged.append(node_id)
        if tensor <= gpu.no_tensor_work_percent:
            spinning[node_id] = {"utilization": round(utilization, 1), "tensor_active": round(tensor, 1),
                                 "power_w": _rounded(node.mean(POWER)), "sm_clock_mhz": _rounded(node.mean(SM_CLOCK))}
    if not judged:
        return None
    throughput = [v for c in metrics.efa.values() for k, v in c.totals.items() if k in EFA_THROUGHPUT_COUNTERS]
    return Activity(judged, spinning, sum(throughput) if throughput else None, format_duration(metrics.end -
                                                                                              metrics.start))


def metrics_unread(ctx: CheckContext) -> tuple[str, str] | None:
    """(code, message) of why the run's GPU metrics could not be read (throttled, denied, unreachable), or None
    when they were: a job_activity of None then means no GPU publishes tensor activity, not that nobody looked."""
    try:
        metrics = cluster_metrics(ctx)  # the run's one snapshot: memoised, so this re-raises what the first read did
    except Exception as exc:
        failure = describe_aws_failure(exc)
        return (failure.code, failure.message) if failure else (type(exc).__name__, str(exc)[:300])
    if metrics.unreadable:  # the snapshot was made, but a source failed for these nodes
        first = next(iter(metrics.unreadable.values()))
        return first.code, f"{first.message} (the metrics of {len(metrics.unreadable)} of {len(metrics.nodes)} nodes)"
    return None


def _rounded(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def flight_recorder_prefixes(ctx: CheckContext, gaps: Gaps) -> list[str]:
    """The configured prefixes as S3 ones: an ``fsx://fs-id/path/<file prefix>`` is followed to the S3 prefix its
    data repository association exports that path to (as for checkpoints: the FSx API cannot list files)."""
    configured = ctx.settings.training.flight_recorder
    fsx = {uri: uri.rsplit("/", 1) for uri in configured if uri.startswith("fsx://")}
    out = [uri for uri in configured if uri.startswith("s3://")]
    if not fsx:
        return out
    directories = {directory: file_prefix for directory, file_prefix in fsx.values()}
    with gaps.guard("the FSx file systems the flight-recorder dumps are written to"):
        for target in resolve_fsx(ctx.client("fsx"), sorted(directories), gaps):
            uri = f"{target.location}/{directories[target.location]}"
            if target.s3_uri is None:
                gaps.add(f"the NCCL flight recorder dumps under {uri}", "FsxContentsUnreadable",
                         f"{target.unreadable}: give the dumps' directory a data repository association that exports "
                         "new files to S3, or copy them to S3 and set that s3:// prefix")
            else:
                out.append(target.s3_uri + directories[target.location])
    return out


def flight_recorder_dumps(ctx: CheckContext, gaps: Gaps) -> list[RankDump]:
    """Every rank's dump under each configured ``s3://bucket/path/<file prefix>`` (or FSx path exported to S3).

    A file under the prefix that cannot be a rank's dump (no rank number after the prefix), cannot be read, or
    does not parse is one unreadable dump reported as a gap; the others are still read."""
    dumps: list[RankDump] = []
    for uri in flight_recorder_prefixes(ctx, gaps):
        bucket, _, key_prefix = uri[len("s3://"):].partition("/")
        file_prefix = key_prefix.rsplit("/", 1)[-1] or "nccl_trace_rank_"
        with gaps.guard(f"the NCCL flight recorder dumps under {uri}"):
            s3 = ctx.client("s3")
            listed = [(obj["Key"], int(obj.get("Size") or 0), obj.get("LastModified"))
                      for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key_prefix)
                      for obj in page.get("Contents", []) if is_dump_name(obj["Key"], file_prefix)]
            budget = BoundedReader(MAX_DUMP_BYTES, MAX_DUMPS_TOTAL_BYTES)
            for key, size, written in listed[:MAX_DUMPS]:
                dump = _read_dump(s3, bucket, key, size, file_prefix, budget, gaps)
                if dump is not None:
                    dump.written = written if isinstance(written, datetime) else None
                    dumps.append(dump)
    return dumps


def _read_dump(s3: Any, bucket: str, key: str, size: int, file_prefix: str, budget: BoundedReader,
               gaps: Gaps) -> RankDump | None:
    """One rank's dump, bounded by its listed size before anything is read; anything wrong with it is one
    unreadable dump, never the check's failure."""
    where = f"s3://{bucket}/{key}"
    gap = f"the flight recorder dump {where}"
    rank = rank_of(key, file_prefix)
    if rank is None:
        gaps.add(gap, "UnreadableDump", f"its name gives no rank (no number after {file_prefix!r}): PyTorch names each "
                 "rank's dump <prefix><rank>")
        return None
    try:
        try:
            budget.admit(where, size)  # from the listing, before anything is read
        except FileRefused as exc:
            raise DumpError(str(exc)) from None
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read(MAX_DUMP_BYTES + 1)
        return parse_dump(rank, where, load_dump(body))
    except DumpError as exc:
        gaps.add(gap, "UnreadableDump", str(exc))
    except Exception as exc:  # one object denied or gone: that dump is unread, not the check
        failure = describe_aws_failure(exc)
        if failure is None:
            raise
        gaps.add(gap, failure.code, failure.message, failure.iam_action)
    return None


def node_xids(events: list[LogEvent], now: datetime, keys: NodeKeys) -> dict[str, list[dict[str, Any]]]:
    """Xid lines in the job's log groups (the nodes' syslog/dmesg streams), by host key (the node, whatever name
    their stream gives it), worst first."""
    found: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if "NVRM: Xid" not in event.text:
            continue
        key = keys.of(event)
        for xid in parse_kernel_log(event.text, now):
            found.setdefault(key or "?", []).append(_xid_facts(xid, event))
    for items in found.values():
        items.sort(key=lambda x: -ACTION_ORDER.index(x["action"]))
    return found


def _xid_facts(xid: Any, event: LogEvent) -> dict[str, Any]:
    """The few facts of a parsed Xid the finding quotes (kept in one place: the Xid parser's shape may change)."""
    verdict = xid.verdict
    return {"xid": xid.xid, "meaning": verdict.description, "action": verdict.action, "pci": xid.pci,
            "time": event.time.isoformat(timespec="seconds"), "line": xid.line[-240:]}


def explains(xids: list[dict[str, Any]]) -> bool:
    """An Xid that needs the GPU reset, the node rebooted or the GPU replaced explains a rank that stopped."""
    return any(ACTION_ORDER.index(x["action"]) >= ACTION_ORDER.index("reset") for x in xids)


def cross_reference(ctx: CheckContext, instances: list[Instance], hyperpod_ids: list[str]) -> tuple[
        dict[str, dict[str, Any]], list[str]]:
    """Per suspect instance (or HyperPod node id): EFA error counts, a Spot interruption, the HyperPod status;
    and what could not be looked at (never an error of this check: it names the culprit without them)."""
    facts: dict[str, dict[str, Any]] = {i.id: {} for i in instances}
    facts.update({node: {} for node in hyperpod_ids})
    missing: list[str] = []
    ids = {i.id for i in instances}
    if ids:
        try:
            metrics = cluster_metrics(ctx)
            errors = set(ctx.settings.gpu.efa_metrics) | set(metrics.efa_counters)  # not the RDMA byte counts
            for counters in metrics.efa.values():
                rising = {k: v for k, v in counters.totals.items()
                          if k in errors and v >= ctx.settings.gpu.efa_min_events}
                if counters.instance_id in ids and rising:
                    totals = facts[counters.instance_id].setdefault("efa_errors", {})
                    for name, value in rising.items():
                        totals[name] = totals.get(name, 0.0) + value
        except Exception as exc:
            missing.append(_why("EFA error counters", exc))
    if any(i.lifecycle == "spot" for i in instances):
        try:
            spot = ctx.shared(SPOT_KEY, lambda: load_spot_facts(ctx))
            for item in interruptions(ctx, spot):
                if item.instance_id in ids:
                    facts[item.instance_id]["spot_interruption"] = item.sentence(ctx.now)
        except Exception as exc:
            missing.append(_why("Spot interruption notices", exc))
    cluster = ctx.inventory.hyperpod.name if ctx.inventory.hyperpod else ctx.settings.hyperpod.cluster_name
    if cluster and hyperpod_ids:
        try:
            for node in hyperpod_nodes_of(ctx, cluster):
                if node.node_id in facts:
                    facts[node.node_id]["hyperpod_status"] = node.status + (f" ({node.message})" if node.message
                                                                            else "")
        except Exception as exc:
            missing.append(_why(f"HyperPod node status in {cluster}", exc))
    return facts, missing


def _why(what: str, exc: Exception) -> str:
    failure = describe_aws_failure(exc)
    return f"{what}: {failure.code} ({failure.iam_action or failure.message})" if failure else f"{what}: {exc}"


def training_iam(*checks: type[Check]) -> tuple[str, ...]:
    own = ("logs:DescribeLogGroups", "logs:DescribeLogStreams", "logs:FilterLogEvents", "s3:GetObject", "s3:ListBucket",
           "sagemaker:ListClusterNodes", "fsx:DescribeFileSystems", "fsx:DescribeDataRepositoryAssociations")
    return tuple(sorted({*own, *(a for check in checks for a in check.iam_actions)}))
