"""Checkpoints as plain data, and the pure logic that finds the newest one and judges whether it is whole.

Training frameworks name checkpoints by step (``step-000120/``, ``global_step1200/``, ``checkpoint-5000/``,
``iter_0001200/``, ``epoch=3-step=1200.ckpt``), so the newest is found from one delimiter listing of the
location's top level, and only the newest two checkpoints are listed in full. Where names carry no step,
the whole location is listed and the newest is the one written last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# A keyword followed by the number; 'step' wins over 'epoch' in names such as 'epoch=3-step=1200.ckpt'.
_KEYWORD_STEP = re.compile(r"(global_step|step|checkpoint|ckpt|iteration|iter|epoch)[-_=]?(\d+)", re.I)
_BARE_STEP = re.compile(r"^(\d+)$")

BY_STEP = "step-numbered names"
BY_TIME = "newest by write time (names carry no step number)"


def step_of(name: str) -> int | None:
    """The training step a checkpoint's name carries, or None ('tensorboard', 'latest', '2024-05-01')."""
    name = name.rstrip("/")
    matches = _KEYWORD_STEP.findall(name)
    stepped = [number for keyword, number in matches if "step" in keyword.lower()]
    if stepped:
        return int(stepped[-1])
    if matches:
        return int(matches[0][1])
    bare = _BARE_STEP.match(name)
    return int(bare.group(1)) if bare else None


@dataclass(frozen=True)
class StoredObject:
    key: str  # relative to the location (top level) or to its checkpoint folder (inside one)
    size: int
    last_modified: datetime


@dataclass(frozen=True)
class Checkpoint:
    name: str  # 'step-000120' (a folder) or 'ckpt-5000.pt' (one file)
    uri: str
    step: int | None
    files: tuple[StoredObject, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def last_modified(self) -> datetime:
        return max(f.last_modified for f in self.files)

    def file_names(self) -> set[str]:
        """Relative names with this checkpoint's own step number masked, so 'model_120.pt' matches 'model_100.pt'."""
        if self.step is None:
            return {f.key for f in self.files}
        own = re.compile(rf"(?<!\d)0*{self.step}(?!\d)")
        return {own.sub("{step}", f.key) for f in self.files}

    def describe(self) -> dict[str, object]:
        return {"uri": self.uri, "step": self.step, "files": len(self.files), "bytes": self.size,
                "last_modified": self.last_modified.isoformat()}


class Lister(Protocol):
    """One checkpoint location (S3 prefix, local directory) as three listings."""

    root: str  # URI of the location, ending in '/'

    def level(self) -> tuple[list[str], list[StoredObject]]:
        """Folder names and files directly under the root (one delimiter listing)."""
        ...

    def tree(self, folder: str) -> list[StoredObject]:
        """Every file under root/folder/, keys relative to that folder."""
        ...

    def everything(self) -> list[StoredObject]:
        """Every file under the root, keys relative to it."""
        ...


@dataclass(frozen=True)
class LocationScan:
    location: str  # as configured
    root: str  # what was listed (for an FSx location, its S3 export)
    newest: Checkpoint | None = None
    previous: Checkpoint | None = None
    checkpoints: int = 0
    method: str = BY_STEP
    via: str | None = None  # how an FSx location was followed, e.g. 'fs-... exports /ckpt to s3://...'
    problem: str | None = None  # why nothing was found, when known ('bucket does not exist')

    def evidence(self) -> dict[str, object]:
        """Where and how this location was read: the first facts of every checkpoint finding."""
        facts: dict[str, object] = {"location": self.location, "listed": self.root, "found_by": self.method,
                                    "checkpoints_seen": self.checkpoints}
        if self.via:
            facts["via"] = self.via
        return facts


def scan_location(lister: Lister, location: str, via: str | None = None) -> LocationScan:
    folders, files = lister.level()
    stepped_folders = [(step, name) for name in folders if (step := step_of(name)) is not None]
    stepped_files = [(step, obj) for obj in files if (step := step_of(obj.key)) is not None]
    if stepped_folders or stepped_files:
        candidates: list[tuple[int, str, StoredObject | None]] = [(s, n, None) for s, n in stepped_folders]
        candidates += [(s, o.key, o) for s, o in stepped_files]
        candidates.sort(key=lambda c: (c[0], c[1]))
        picked = [_materialise(lister, step, name, obj) for step, name, obj in candidates[-2:]]
        picked = [c for c in picked if c is not None]  # a folder emptied between the two listings
        return LocationScan(location, lister.root, newest=picked[-1] if picked else None,
                            previous=picked[-2] if len(picked) > 1 else None,
                            checkpoints=len(candidates), method=BY_STEP, via=via)
    if not folders:
        # Only unnumbered files: the location is one checkpoint, overwritten in place (a 'last.ckpt', or a
        # location naming a checkpoint folder itself). Nothing to compare it with.
        single = Checkpoint(lister.root.rstrip("/").rsplit("/", 1)[-1], lister.root, None, tuple(files))
        return LocationScan(location, lister.root, newest=single if files else None, checkpoints=int(bool(files)),
                            method=BY_TIME, via=via)
    ordered = sorted(_group_by_folder(lister.root, lister.everything()), key=lambda c: (c.last_modified, c.name))
    return LocationScan(location, lister.root, newest=ordered[-1] if ordered else None,
                        previous=ordered[-2] if len(ordered) > 1 else None,
                        checkpoints=len(ordered), method=BY_TIME, via=via)


def _materialise(lister: Lister, step: int, name: str, obj: StoredObject | None) -> Checkpoint | None:
    if obj is not None:
        return Checkpoint(name, lister.root + name, step, (obj,))
    files = tuple(lister.tree(name))
    return Checkpoint(name, f"{lister.root}{name}/", step, files) if files else None


def _group_by_folder(root: str, objects: Sequence[StoredObject]) -> list[Checkpoint]:
    """Each top-level folder is one checkpoint; top-level files beside them (config.yaml, DeepSpeed's 'latest'
    pointer) are not checkpoints."""
    groups: dict[str, list[StoredObject]] = {}
    for obj in objects:
        head, sep, rest = obj.key.partition("/")
        if sep:
            groups.setdefault(head, []).append(StoredObject(rest, obj.size, obj.last_modified))
    return [Checkpoint(name, f"{root}{name}/", None, tuple(files)) for name, files in groups.items()]


@dataclass(frozen=True)
class Completeness:
    """How the newest checkpoint compares with its predecessor."""

    missing_files: tuple[str, ...]
    size_ratio: float | None  # newest bytes / previous bytes
    min_ratio: float

    @property
    def too_small(self) -> bool:
        return self.size_ratio is not None and self.size_ratio < self.min_ratio

    @property
    def incomplete(self) -> bool:
        return bool(self.missing_files) or self.too_small


def compare(newest: Checkpoint, previous: Checkpoint, min_ratio: float) -> Completeness:
    missing = tuple(sorted(previous.file_names() - newest.file_names()))
    ratio = newest.size / previous.size if previous.size else None
    return Completeness(missing, ratio, min_ratio)


def usable(scan: LocationScan, min_ratio: float) -> Checkpoint | None:
    """The checkpoint a restart would resume from: the newest unless it is incomplete, then its predecessor."""
    if scan.newest is None:
        return None
    if scan.previous is not None and compare(scan.newest, scan.previous, min_ratio).incomplete:
        return scan.previous
    return scan.newest
