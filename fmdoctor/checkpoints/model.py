"""Checkpoints as plain data: what a listing shows, and the verdict on whether a restart could load one.

Training frameworks name checkpoints by step (``step-000120/``, ``global_step1200/``, ``checkpoint-5000/``,
``iter_0001200/``, ``epoch=3-step=1200.ckpt``), so the newest is found from one delimiter listing of the
location's top level, and only the newest checkpoints are listed in full (:mod:`fmdoctor.checkpoints.scan`).
Whether one is complete is proved from the framework's own marker (:mod:`fmdoctor.checkpoints.frameworks`);
where none applies, a comparison with its predecessor (:mod:`fmdoctor.checkpoints.compare`) is a hint, never a
proof (``Verdict.proven``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

# A keyword followed by the number; 'step' wins over 'epoch' in names such as 'epoch=3-step=1200.ckpt'.
_KEYWORD_STEP = re.compile(r"(global_step|step|checkpoint|ckpt|iteration|iter|epoch)[-_=]?(\d+)", re.I)
_BARE_STEP = re.compile(r"^(\d+)$")
# MosaicML Composer's 'ep1-ba4200-rank0.pt' (the batch is the step); Orbax's temporary folder
# '<prefix_>1000.orbax-checkpoint-tmp-<ts>' (orbax step.py TMP_DIR_STEP_PATTERN).
_COMPOSER_STEP = re.compile(r"^ep\d+-ba(\d+)(?=$|[-_.])")
_ORBAX_TMP_STEP = re.compile(r"^(?:.*?_)?(\d+)\.orbax-checkpoint-tmp")

BY_STEP = "step-numbered names"
BY_TIME = "newest by write time (names carry no step number)"


def step_of(name: str) -> int | None:
    """The training step a checkpoint's name carries, or None ('tensorboard', 'latest', '2024-05-01')."""
    name = name.rstrip("/")
    special = _COMPOSER_STEP.match(name) or _ORBAX_TMP_STEP.match(name)
    if special:
        return int(special.group(1))
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
    link_target: str | None = None  # a symbolic link (local paths only): what it points to


@dataclass(frozen=True)
class Checkpoint:
    name: str  # 'step-000120' (a folder) or 'ckpt-5000.pt' (one file)
    uri: str
    step: int | None
    files: tuple[StoredObject, ...]
    started: datetime | None = None  # when its save began, where a marker says so (NeMo's '-unfinished' file)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def last_modified(self) -> datetime:
        stamps = [f.last_modified for f in self.files] + ([self.started] if self.started else [])
        return max(stamps)

    @property
    def first_modified(self) -> datetime:
        """The earliest write of its save: a pointer rewritten after this came after the save began."""
        stamps = [f.last_modified for f in self.files] + ([self.started] if self.started else [])
        return min(stamps)

    def describe(self) -> dict[str, object]:
        return {"uri": self.uri, "step": self.step, "files": len(self.files), "bytes": self.size,
                "last_modified": self.last_modified.isoformat()}


@dataclass(frozen=True)
class Verdict:
    """Whether a restart could load a checkpoint, and how that is known.

    ``complete`` is None when nothing could prove or disprove it (no marker, nothing to compare with): such
    a checkpoint is taken as usable, and the evidence says that nothing proved it."""

    complete: bool | None
    method: str  # MARKER, COMPARISON or UNPROVEN
    proofs: tuple[str, ...] = ()  # what was checked, one sentence each
    reasons: tuple[str, ...] = ()  # why it is incomplete
    missing_files: tuple[str, ...] = ()
    size_ratio: float | None = None  # bytes / the predecessor's bytes (comparison only)
    world_size: str | None = None  # 'ranks 0-63 -> 0-31' when the comparison crossed a change of world size
    framework: str | None = None  # whose proof decided it ('PyTorch DCP'), for a framework marker

    @property
    def proven(self) -> bool:
        """Decided by a framework's own marker; a comparison is a hint, and nothing is nothing."""
        return self.method == MARKER and self.complete is not None

    @property
    def incomplete(self) -> bool:
        return self.complete is False

    def evidence(self) -> dict[str, object]:
        facts: dict[str, object] = {"method": self.method, "proven": self.proven, "proofs": list(self.proofs)}
        if self.framework:
            facts["framework"] = self.framework
        if self.reasons:
            facts["reasons"] = list(self.reasons)
        if self.world_size:
            facts["world_size"] = self.world_size
        return facts


MARKER = "framework marker"
COMPARISON = "comparison with the previous checkpoint"
UNPROVEN = "nothing proves it (no marker, nothing to compare with)"
# What a location without a framework marker lacks (the README's checkpoint table lists every marker read).
WOULD_PROVE = ("a framework's own completion marker fmdoctor reads from a listing: PyTorch DCP's .metadata, "
               "DeepSpeed's 'latest', Megatron's tracker or metadata.json, NeMo's '-unfinished' marker, Hugging "
               "Face Trainer's trainer_state.json, Accelerate's random_states_0.pkl (one per process), Orbax's "
               "commit_success.txt, a safetensors index; or the job's own log line saying the save of this step "
               "finished")


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
    usable: Checkpoint | None = None  # what a restart would load: not (suspected) incomplete, not under way
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # by checkpoint name, for those judged

    def verdict(self, checkpoint: Checkpoint) -> Verdict:
        return self.verdicts.get(checkpoint.name, Verdict(None, UNPROVEN))

    def usable_because(self) -> str:
        """Which proof made the usable checkpoint usable, as a clause ('proven whole by PyTorch DCP's marker')."""
        if self.usable is None:
            return "no checkpoint is usable"
        verdict = self.verdict(self.usable)
        if verdict.proven:
            return f"proven whole by {verdict.framework}'s own marker"
        if verdict.method == COMPARISON:
            return "not proven whole: no framework marker, it only has the shape of the save before it"
        return "not proven whole: no framework marker, and nothing to compare it with"

    @property
    def suspect(self) -> Checkpoint | None:
        """The newest checkpoint when only a comparison (a hint, no proof) kept it from being the usable one."""
        newest = self.newest
        if newest is None or newest is self.usable:
            return None
        verdict = self.verdict(newest)
        return newest if verdict.method == COMPARISON and verdict.incomplete else None

    @property
    def in_progress(self) -> Checkpoint | None:
        """The newest checkpoint when it is not the usable one (a save under way, or one that died)."""
        return self.newest if self.newest is not None and self.newest is not self.usable else None

    def evidence(self) -> dict[str, object]:
        """Where and how this location was read: the first facts of every checkpoint finding."""
        facts: dict[str, object] = {"location": self.location, "listed": self.root, "found_by": self.method,
                                    "checkpoints_seen": self.checkpoints}
        if self.via:
            facts["via"] = self.via
        if self.usable is not None:
            facts["usable"] = self.usable.uri
            facts["proof"] = self.verdict(self.usable).evidence()
            facts["usable_because"] = self.usable_because()
        return facts
