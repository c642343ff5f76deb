"""What the scheduler checks share: the run's one read of the scheduler (Slurm or Kubernetes), its nodes tied
to instances through the one node identity, and the jobs annotation every node finding gets."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fmdoctor.engine.check import NotApplicable, Unverified
from fmdoctor.engine.context import CheckContext, RunScope
from fmdoctor.engine.model import Finding
from fmdoctor.scheduler.model import SLURM, SchedulerNode, SchedulerUnavailable
from fmdoctor.scheduler.source import SchedulerMap, detect_kinds, map_view, read_view

SHARED_KEY = "scheduler.map."  # + kind
# A front end (the demo) may put a reader here: (kind, SchedulerSettings) -> SchedulerView, used instead of
# the real scheduler; recorded answers only.
READER_EXTRA = "scheduler_reader"
MAX_JOBS_SHOWN = 20  # per finding; the count says how many there are


def kinds_of(scope: RunScope) -> tuple[tuple[str, ...], str]:
    return detect_kinds(scope.settings.scheduler, scope.inventory, tuple(scope.settings.training.log_groups))


def _load(scope: RunScope, kind: str) -> SchedulerMap:
    reader = scope.extras.get(READER_EXTRA)
    view = reader(kind, scope.settings.scheduler) if reader else read_view(kind, scope.settings.scheduler)
    return map_view(view, scope.inventory, tuple(scope.settings.gpu.hostname_tags))


def scheduler_map(ctx: CheckContext, want: str | None = None) -> SchedulerMap:
    """The run's scheduler view; NotApplicable with no scheduler (or another kind than ``want``), Unverified
    (recorded with how to grant access) when it cannot be read."""
    kinds, why = kinds_of(ctx.scope)
    if not kinds:
        raise NotApplicable("no scheduler found")
    if want is not None and want not in kinds:
        raise NotApplicable(f"the cluster's scheduler is {' and '.join(kinds)} ({why}), not {want}")
    kind = want or kinds[0]
    try:
        found = ctx.shared(SHARED_KEY + kind, lambda: _load(ctx.scope, kind))
    except SchedulerUnavailable as exc:
        ctx.unverified(f"the {kind} scheduler's view of the nodes and jobs", exc.code, f"{exc.message}; to grant "
                       f"it: {exc.grant}")
        raise Unverified(exc.message) from None
    for gap in found.view.gaps:
        ctx.unverified(f"part of the {kind} scheduler's view: {gap}", "SchedulerPartial", gap)
    return found


def node_label(found: SchedulerMap, node: SchedulerNode) -> str:
    instance_id = found.instance_of.get(node.name)
    if instance_id is None:
        return node.name
    instance = found.identities.nodes.get(instance_id)
    name = instance.name if instance is not None else instance_id
    return f"{node.name} ({name}, {instance_id})" if name != instance_id else f"{node.name} ({instance_id})"


def resource_of(found: SchedulerMap, node: SchedulerNode) -> str:
    """The instance id where the one identity knows it; else the scheduler's node name."""
    return found.instance_of.get(node.name) or f"{found.view.kind}:{node.name}"


def jobs_evidence(found: SchedulerMap, node_names: Sequence[str]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for name in node_names:
        for job in found.view.jobs_on(name):
            seen.setdefault(job.id, job.to_evidence())
    return list(seen.values())


def node_evidence(found: SchedulerMap, node: SchedulerNode) -> dict[str, Any]:
    jobs = jobs_evidence(found, [node.name])
    return {"scheduler": found.view.kind, "scheduler_source": found.view.source,
            "scheduler_node": node.to_evidence(), "instance": found.instance_of.get(node.name),
            "jobs": jobs[:MAX_JOBS_SHOWN], "job_count": len(jobs)}


def annotate_jobs(scope: RunScope, findings: Sequence[Finding]) -> None:
    """Every finding on a node gets the scheduler's jobs (or pods) on it: evidence ``jobs`` (id, name, user,
    nodes, elapsed_s, state) and ``scheduler_nodes``; the scheduler is read once per run (shared with the
    scheduler checks). A finding that already lists them (a scheduler check) is left as it is; a scheduler that
    cannot be read leaves ``jobs_unverified`` with why, never an empty ``jobs``."""
    wanted = [f for f in findings if "jobs" not in f.evidence and "scheduler" not in f.evidence]
    if not wanted:
        return
    kinds, _ = kinds_of(scope)
    if not kinds:
        return
    from fmdoctor.engine.identity import NodeIdentities

    identities = NodeIdentities.of(scope.inventory, tuple(scope.settings.gpu.hostname_tags))
    on_nodes = [(f, identities.resolve(f.resource).instance) for f in wanted]
    on_nodes = [(f, i) for f, i in on_nodes if i is not None]
    if not on_nodes:
        return
    for kind in kinds:
        _annotate(scope, kind, on_nodes)


def _annotate(scope: RunScope, kind: str, on_nodes: Sequence[tuple[Finding, Any]]) -> None:
    try:
        found = scope.shared.get(SHARED_KEY + kind, lambda: _load(scope, kind))
    except SchedulerUnavailable as exc:
        for finding, _ in on_nodes:
            finding.evidence.setdefault("jobs_unverified", f"{kind}: {exc.message}")
        return
    jobs_gap = next((g for g in found.view.gaps if g.startswith(("running jobs", "pods"))), None)
    for finding, instance in on_nodes:
        assert instance is not None
        names = [n.name for n in found.nodes_of(instance.id)]
        if not names:
            continue
        finding.evidence["scheduler_nodes"] = [*finding.evidence.get("scheduler_nodes", []), *names]
        if jobs_gap:
            finding.evidence["jobs_unverified"] = jobs_gap
            continue
        jobs = jobs_evidence(found, names)
        finding.evidence["jobs"] = [*finding.evidence.get("jobs", []), *jobs][:MAX_JOBS_SHOWN]
        if len(jobs) > MAX_JOBS_SHOWN:
            finding.evidence["job_count"] = len(jobs)


def job_rank_hosts(found: SchedulerMap, ranks_per_node: int, known: Mapping[int, str],
                   key: Callable[[str], str | None]) -> tuple[dict[int, str], str] | None:
    """rank -> node key for the one running multi-node Slurm job, by its node list, or None where that is not
    proven.

    torchrun launched from sbatch gets ``--node_rank=$SLURM_NODEID`` and ``--nproc_per_node`` (one rank per GPU):
    global rank = node rank x ranks per node + local rank, and SLURM_NODEID is the node's index in the job's
    node list (srun(1), SLURM_NODEID; https://pytorch.org/docs/stable/elastic/run.html). Only one running
    multi-node job may be the one, and every rank the logs already tie to a host (``known``) must agree with
    this layout, else nothing is mapped: a layout the logs contradict is not used."""
    jobs = [j for j in found.view.jobs if len(j.nodes) > 1]
    if len(jobs) != 1 or ranks_per_node < 1:
        return None
    job = jobs[0]
    nodes = [key(found.instance_of.get(n) or n) for n in job.nodes]

    def host(rank: int) -> str | None:
        index = rank // ranks_per_node
        return nodes[index] if 0 <= index < len(nodes) else None

    if any(host(rank) != key(name) for rank, name in known.items()):
        return None
    mapped = {rank: h for rank in range(len(nodes) * ranks_per_node) if (h := host(rank)) is not None}
    how = (f"Slurm job {job.id} ({job.name}) node list, {ranks_per_node} ranks per node in node-list order"
           + (f"; agrees with the {len(known)} ranks the logs place" if known else ""))
    return mapped, how


def _slurm_quietly(ctx: CheckContext) -> SchedulerMap | None:
    """The run's Slurm view for a check that only borrows it; None where the scheduler is not Slurm or cannot be
    read (that is the scheduler checks' error to record, never the borrower's)."""
    scope = ctx.scope
    kinds, _ = kinds_of(scope)
    if SLURM not in kinds:
        return None
    try:
        found: SchedulerMap = scope.shared.get(SHARED_KEY + SLURM, lambda: _load(scope, SLURM))
    except SchedulerUnavailable:
        return None
    return found


def map_ranks_by_job(ctx: CheckContext, ranks: Iterable[int], known: Mapping[int, str],
                     key: Callable[[str], str | None]) -> dict[int, tuple[str, str]]:
    """For training-stalled: ``ranks`` it names but no log line places, mapped to node keys through the Slurm
    job's node list (:func:`job_rank_hosts`) -> {rank: (node key, how)}; {} where the scheduler is not Slurm, cannot
    be read (this never records an error under the caller), or the layout is not proven."""
    scope = ctx.scope
    found = _slurm_quietly(ctx)
    if found is None:
        return {}
    per_node = {scope.inventory.type_of(i).gpus or scope.inventory.type_of(i).neuron_cores
                for i in scope.inventory.instances if i.id in set(found.instance_of.values())}
    if len(per_node) != 1:
        return {}
    layout = job_rank_hosts(found, per_node.pop(), known, key)
    if layout is None:
        return {}
    mapped, how = layout
    return {r: (mapped[r], how) for r in ranks if r not in known and r in mapped}


def jobs_by_node(ctx: CheckContext, key: Callable[[str], str | None]) -> dict[str, str]:
    """For training-stalled: node key -> the one running Slurm job on it (nodes running several are left out), so
    two jobs writing to one log group are told apart; {} where the scheduler is not Slurm or cannot be read (this
    never records an error under the caller)."""
    found = _slurm_quietly(ctx)
    if found is None:
        return {}
    on: dict[str, set[str]] = {}
    for job in found.view.jobs:
        for name in job.nodes:
            node = key(found.instance_of.get(name) or name)
            if node:
                on.setdefault(node, set()).add(job.id)
    return {node: next(iter(ids)) for node, ids in on.items() if len(ids) == 1}
