"""Read one location with as few listings as possible and find the checkpoint a restart would load.

One delimiter listing of the top level names every checkpoint and the markers beside them (DeepSpeed's
``latest``, Megatron's tracker, NeMo's ``-unfinished`` files, Lightning's ``last.ckpt``); then only the
newest two checkpoints are listed in full. Only when both are proven incomplete are older ones listed, one at
a time (at most :data:`MAX_WALK_BACK` more). Order never comes from the listing itself: a directory bucket
(S3 Express One Zone) returns keys out of lexicographic order, and shows a prefix for a save whose
multipart uploads are still in flight (such a folder lists no object, and is not a checkpoint yet).

The usable checkpoint is never a save that may still be under way: one proven incomplete, one only a comparison
calls incomplete, or one no marker proves whole that was written within the write grace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from fmdoctor.checkpoints.compare import compare
from fmdoctor.checkpoints.frameworks import (
    LIGHTNING_LAST,
    LocationContext,
    LocationMarkers,
    is_staging,
    judge,
    location_context,
    location_markers,
)
from fmdoctor.checkpoints.model import (
    BY_STEP,
    BY_TIME,
    Checkpoint,
    Lister,
    LocationScan,
    StoredObject,
    Verdict,
    step_of,
)
from fmdoctor.engine.concurrency import all_at_once

MAX_WALK_BACK = 3  # older checkpoints listed when the newest two are both proven incomplete
RUN_DEPTH = 8  # how deep below a location read by write time step-numbered checkpoints are looked for
LAST_SUFFIX = "-last"  # NeMo and Lightning name the checkpoint auto-resume loads '<name>-last'


@dataclass(frozen=True)
class _Candidate:
    step: int
    name: str
    file: StoredObject | None = None  # a single-file checkpoint
    marker_only: StoredObject | None = None  # a NeMo marker whose checkpoint left nothing yet


@dataclass(frozen=True)
class _Rules:
    min_ratio: float
    settled: datetime | None  # an unproven save written after this may still be under way: never usable yet
    object_store: bool


def scan_location(lister: Lister, location: str, via: str | None = None, min_ratio: float = 0.5,
                  settled: datetime | None = None) -> LocationScan:
    """``settled``: the time before which a save has had its write grace (now - checkpoints.write_grace)."""
    folders, files = lister.level()
    markers = location_markers(files, folders)
    rules = _Rules(min_ratio, settled, lister.root.startswith("s3://"))
    plain = [f for f in files if f.link_target is None and not markers.is_marker(f.key)]
    candidates = _candidates(folders, plain, markers)
    if candidates:
        return _by_step(lister, location, via, rules, candidates, markers, plain)
    if not folders:
        # Only unnumbered files: the location is one checkpoint, overwritten in place (a 'last.ckpt', or a
        # location naming a checkpoint folder itself). Nothing to compare it with: only markers can tell.
        if not plain:
            return LocationScan(location, lister.root, method=BY_TIME, via=via)
        single = Checkpoint(lister.root.rstrip("/").rsplit("/", 1)[-1], lister.root, None, tuple(plain))
        context = location_context([single], rules.object_store)
        verdicts = {single.name: judge(single, markers, context, top_level=False)}
        return LocationScan(location, lister.root, newest=single, checkpoints=1, method=BY_TIME, via=via,
                            usable=_usable([single], verdicts, rules), verdicts=verdicts)
    return _by_time(lister, location, via, rules, markers)


def _usable(ordered: list[Checkpoint], verdicts: dict[str, Verdict], rules: _Rules) -> Checkpoint | None:
    """The newest checkpoint a restart could load: not proven (or suspected) incomplete, and not a save that
    may still be under way (written within the write grace with no marker proving it whole)."""
    for checkpoint in ordered:
        verdict = verdicts.get(checkpoint.name)
        if verdict is None or verdict.incomplete:
            continue
        if not verdict.proven and rules.settled is not None and checkpoint.last_modified > rules.settled:
            continue
        return checkpoint
    return None


def _candidates(folders: list[str], files: list[StoredObject], markers: LocationMarkers) -> list[_Candidate]:
    found = [_Candidate(step, name) for name in folders if (step := step_of(name)) is not None]
    found += [_Candidate(step, f.key, file=f) for f in files if (step := step_of(f.key)) is not None]
    present = {c.name.removesuffix(".ckpt") for c in found}
    found += [_Candidate(step, name, marker_only=marker) for name, marker in markers.unfinished.items()
              if name not in present and (step := step_of(name)) is not None]
    # NeMo's AutoResume (and Lightning with a '-last' name) resumes only from '<name>-last' checkpoints; the
    # others are top-k copies. A '-last' symlink stands for the folder it points to.
    last_named = {c.name for c in found if c.name.removesuffix(".ckpt").endswith(LAST_SUFFIX)}
    last_named |= {t for link, t in markers.links.items() if link.removesuffix(".ckpt").endswith(LAST_SUFFIX)}
    if last_named:
        found = [c for c in found if c.name in last_named]
    return sorted(found, key=lambda c: (c.step, c.name))


def _by_step(lister: Lister, location: str, via: str | None, rules: _Rules, candidates: list[_Candidate],
             markers: LocationMarkers, files: list[StoredObject]) -> LocationScan:
    listed: list[Checkpoint] = []
    pending = list(reversed(candidates))
    while pending and len(listed) < 2:
        # The newest two are listed at once (neither listing needs the other); an empty one brings in the next.
        batch = [pending.pop(0) for _ in range(min(2 - len(listed), len(pending)))]
        for checkpoint in all_at_once(lambda c: _materialise(lister, c), batch, name="fmdoctor-checkpoints"):
            if checkpoint is not None:  # a folder emptied between listings, or uploads still in flight
                listed.append(checkpoint)
    last_file = _lightning_last(lister.root, files, listed)
    if last_file is not None:
        listed.insert(0, last_file)
        listed = listed[:2]
    context = location_context(listed, rules.object_store)
    verdicts = _judge_pair(listed, markers, context, rules.min_ratio)
    usable = _usable(listed, verdicts, rules)
    walked = 0
    while usable is None and pending and walked < MAX_WALK_BACK:
        checkpoint = _materialise(lister, pending.pop(0))
        walked += 1
        if checkpoint is None:
            continue
        verdicts[checkpoint.name] = judge(checkpoint, markers, context)
        usable = _usable([checkpoint], verdicts, rules)
    newest = listed[0] if listed else None
    previous = listed[1] if len(listed) > 1 else None
    return LocationScan(location, lister.root, newest=newest, previous=previous, checkpoints=len(candidates),
                        method=BY_STEP, via=via, usable=usable, verdicts=verdicts)


def _judge_pair(listed: list[Checkpoint], markers: LocationMarkers, context: LocationContext,
                min_ratio: float) -> dict[str, Verdict]:
    """Markers first; where none applies, the newest is compared with the one before it (a hint only)."""
    verdicts = {c.name: judge(c, markers, context) for c in listed}
    if len(listed) > 1 and verdicts[listed[0].name].complete is None:
        verdicts[listed[0].name] = compare(listed[0], listed[1], min_ratio)
    return verdicts


def _materialise(lister: Lister, candidate: _Candidate) -> Checkpoint | None:
    if candidate.file is not None:
        return Checkpoint(candidate.name, lister.root + candidate.name, candidate.step, (candidate.file,))
    if candidate.marker_only is not None:
        return Checkpoint(candidate.name, f"{lister.root}{candidate.name}/", candidate.step, (),
                          started=candidate.marker_only.last_modified)
    files = tuple(lister.tree(candidate.name))
    return Checkpoint(candidate.name, f"{lister.root}{candidate.name}/", candidate.step, files) if files else None


def _lightning_last(root: str, files: list[StoredObject], listed: list[Checkpoint]) -> Checkpoint | None:
    """Lightning's ``last.ckpt`` copy when it is newer than every step-named save (it is rewritten after each
    save, and top-k files keep the best, not the newest)."""
    lasts = [f for f in files if LIGHTNING_LAST.match(f.key)]
    if not lasts:
        return None
    last = max(lasts, key=lambda f: f.last_modified)
    if listed and last.last_modified <= listed[0].last_modified:
        return None
    return Checkpoint(last.key, root + last.key, None, (last,))


def _by_time(lister: Lister, location: str, via: str | None, rules: _Rules,
             markers: LocationMarkers, depth: int = 0) -> LocationScan:
    groups = _group_by_folder(lister.root, lister.everything())
    groups = [g for g in groups if not is_staging(g.name)]
    groups += [Checkpoint(name, f"{lister.root}{name}/", None, (), started=m.last_modified)
               for name, m in markers.unfinished.items() if name not in {g.name for g in groups}]
    verdicts: dict[str, Verdict] = {}
    from_runs: list[Checkpoint] = []
    for group in groups:
        run = _run_directory(group, location, via, rules, depth + 1)
        for checkpoint in dict.fromkeys(c for c in (run.newest, run.usable) if c is not None) if run else ():
            named = replace(checkpoint, name=f"{group.name}/{checkpoint.name}")
            verdicts[named.name] = run.verdict(checkpoint)
            from_runs.append(named)
    # A location of runs: its other folders (tensorboard/, logs/) are no checkpoints. Else each folder is one.
    checkpoints = from_runs or groups
    ordered = sorted(checkpoints, key=lambda c: (c.last_modified, c.name), reverse=True)
    context = location_context(ordered[:2], rules.object_store)
    unjudged = [c for c in ordered[:2] if c.name not in verdicts]
    verdicts.update(_judge_pair(ordered[:2], markers, context, rules.min_ratio) if len(unjudged) == 2
                    else {c.name: judge(c, markers, context) for c in unjudged})
    for checkpoint in ordered[2:]:
        if _usable(ordered, verdicts, rules) is not None:
            break
        verdicts.setdefault(checkpoint.name, judge(checkpoint, markers, context))
    usable = _usable(ordered, verdicts, rules)
    return LocationScan(location, lister.root, newest=ordered[0] if ordered else None,
                        previous=ordered[1] if len(ordered) > 1 else None, checkpoints=len(ordered),
                        method=BY_TIME, via=via, usable=usable, verdicts=verdicts)


def _run_directory(group: Checkpoint, location: str, via: str | None, rules: _Rules,
                   depth: int = 1) -> LocationScan | None:
    """A folder whose own folders are step-numbered checkpoints (``run1/step-1600/``) is a run directory, not a
    checkpoint: it is read as a location of its own, so its frameworks' proofs judge its newest save (an old save
    that died, which the framework skips when it resumes, is not the run's newest, and does not make the whole
    run incomplete). A folder with such runs deeper (``llama/run1/step-1600/``, up to :data:`RUN_DEPTH` levels)
    is a location of runs, read the same way. Read from the listing in hand: no more requests."""
    paths = {tuple(f.key.split("/")[:-1][:RUN_DEPTH - depth + 1]) for f in group.files}
    stepped = [i for path in paths for i, part in enumerate(path) if step_of(part) is not None]
    if not stepped:
        return None
    run = _Listed(group.uri, group.files)
    inner_folders, files = run.level()
    markers = location_markers(files, inner_folders)
    if min(stepped) > 0:
        return _by_time(run, location, via, rules, markers, depth + 1)
    plain = [f for f in files if f.link_target is None and not markers.is_marker(f.key)]
    candidates = _candidates(inner_folders, plain, markers)
    return _by_step(run, location, via, rules, candidates, markers, plain) if candidates else None


@dataclass(frozen=True)
class _Listed:
    """A folder already listed in full, served as a location (keys relative to ``root``)."""

    root: str
    objects: tuple[StoredObject, ...]

    def level(self) -> tuple[list[str], list[StoredObject]]:
        folders = sorted({o.key.split("/", 1)[0] for o in self.objects if "/" in o.key})
        return folders, [o for o in self.objects if "/" not in o.key]

    def tree(self, folder: str) -> list[StoredObject]:
        prefix = folder + "/"
        return [replace(o, key=o.key[len(prefix):]) for o in self.objects if o.key.startswith(prefix)]

    def everything(self) -> list[StoredObject]:
        return list(self.objects)


def _group_by_folder(root: str, objects: Sequence[StoredObject]) -> list[Checkpoint]:
    """Each top-level folder is one checkpoint; top-level files beside them (config.yaml, DeepSpeed's 'latest'
    pointer) are not checkpoints."""
    groups: dict[str, list[StoredObject]] = {}
    for obj in objects:
        head, sep, rest = obj.key.partition("/")
        if sep:
            groups.setdefault(head, []).append(replace(obj, key=rest))
    return [Checkpoint(name, f"{root}{name}/", None, tuple(files)) for name, files in groups.items()]
