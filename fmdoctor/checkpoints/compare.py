"""The fallback where no framework marker applies: compare a checkpoint with its predecessor. A hint, never a
proof (checkpoint-incomplete raises at most a warning from it, and says why it could be wrong).

Files are grouped into families by name, with three kinds of number masked so that a whole save never looks
different from a whole predecessor:

- rank and process numbers (``zero_pp_rank_{r}_mp_rank_{r}``, ``__{r}_0.distcp``, ``random_states_{r}.pkl``,
  ``rng_state_{r}.pth``, ``ocdbt.process_{r}/``, ``model_rank{r}.pt``): within a family the ranks must form a
  whole grid (0..n-1 in every position), so a hole is a missing shard, while a family whose ranks span a
  different range is a change of world size (an elastic job resumed on fewer nodes writes fewer shards), healthy;
- content-addressed or random names (Orbax's ``ocdbt.process_0/d/<128-bit hex>``, UUIDs): masked as ``{id}``, so
  such a directory is compared by its bytes, not by names that differ in every save;
- the checkpoint's own step (``model_{step}.pt``): a file of the predecessor is there if its name is, with or
  without its step masked, so ``random_states_3.pkl`` in ``checkpoint_3`` is never read as ``{step}``.

The total size is compared either way, since resharding does not change how much state there is.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

from fmdoctor.checkpoints.model import COMPARISON, Checkpoint, Verdict

# A rank or process number: after 'rank' (zero_pp_rank_3, mp_rank_00, rank7), 'process' (ocdbt.process_3,
# *_process_3), Accelerate's 'random_states_' and HF Trainer's 'rng_state_' (one file per process), or the '__'
# of a DCP shard ('__12_0.distcp').
_RANK = re.compile(r"((?<![A-Za-z])(?:rank|process|random_states|rng_state)[_-]?|(?:^|/)__)(\d+)", re.I)
# A content-addressed or random name: 16+ hex digits (Orbax OCDBT data files are 128-bit hex) or a UUID.
_RANDOM = re.compile(r"(?<![0-9A-Za-z])(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,})"
                     r"(?![0-9A-Za-z])", re.I)
_MAX_GRID = 100_000  # a grid larger than this is not a rank layout: only its families are compared
WHY_IT_COULD_BE_WRONG = ("a comparison with the save before it, not a framework's proof: it is wrong when the job "
                         "changed what it saves (a new optimizer, frozen layers, another format) between the two")


@dataclass
class _Family:
    template: str  # with ranks, random names and the step masked
    ranks: dict[tuple[int, ...], str]  # rank tuple -> the file's name
    widths: tuple[int, ...]  # zero padding of each rank position, to name missing files as the writer would
    plain: set[str] = field(default_factory=set)  # its files' templates without the step masked
    size: int = 0

    def extent(self) -> tuple[int, ...]:
        return tuple(max(r[i] for r in self.ranks) + 1 for i in range(len(self.widths)))

    def missing(self) -> set[tuple[int, ...]]:
        """Rank tuples inside the grid its ranks span that have no file."""
        if not self.widths:
            return set()
        extent = self.extent()
        size = 1
        for n in extent:
            size *= n
        if size > _MAX_GRID:
            return set()
        return {r for r in itertools.product(*(range(n) for n in extent)) if r not in self.ranks}

    def holes(self, step: int | None, before: _Family | None = None) -> list[str]:
        """Missing files, less those the predecessor lacked too: a writer that skips ranks with nothing to save
        (Megatron Core's FileSystemWriterAsync) leaves the same gap in every save of the same world size."""
        shared = before.missing() if before is not None and before.extent() == self.extent() else set()
        return [self.name(r, step) for r in sorted(self.missing() - shared)]

    def name(self, ranks: tuple[int, ...], step: int | None) -> str:
        """A missing file named as the writer would have named it (the step as the checkpoint's own)."""
        numbers = iter(f"{r:0{w}d}" for r, w in zip(ranks, self.widths, strict=True))
        template = self.template.replace("{step}", str(step)) if step is not None else self.template
        return re.sub(r"\{rank\}", lambda _: next(numbers), template)


def families(checkpoint: Checkpoint) -> dict[str, _Family]:
    own_step = re.compile(rf"(?<!\d)0*{checkpoint.step}(?!\d)") if checkpoint.step is not None else None
    found: dict[str, _Family] = {}
    for f in checkpoint.files:
        key = _RANDOM.sub("{id}", f.key)
        numbers = [m.group(2) for m in _RANK.finditer(key)]
        plain = _RANK.sub(lambda m: m.group(1) + "{rank}", key)  # ranks first: a rank may equal the step
        template = own_step.sub("{step}", plain) if own_step else plain
        family = found.setdefault(template, _Family(template, {}, tuple(len(n) for n in numbers)))
        family.ranks[tuple(int(n) for n in numbers)] = f.key
        family.plain.add(plain)
        family.size += f.size
    return found


def compare(newest: Checkpoint, previous: Checkpoint, min_ratio: float) -> Verdict:
    """Whether ``newest`` has every kind of file ``previous`` had, whole rank grids, and enough of its size
    (in total, and in each directory of content-addressed files)."""
    new, old = families(newest), families(previous)
    new_plain = set().union(*(f.plain for f in new.values())) if new else set()
    missing = sorted(next(iter(old[t].ranks.values())) for t in old
                     if t not in new and not old[t].plain & new_plain)
    holes = sorted(name for t, family in new.items() for name in family.holes(newest.step, old.get(t)))
    resized = sorted({f"{_span(old[t])} -> {_span(new[t])}" for t in old.keys() & new.keys()
                      if old[t].widths and old[t].extent() != new[t].extent()})
    ratio = newest.size / previous.size if previous.size else None
    reasons = []
    if missing:
        reasons.append(f"{len(missing)} kind(s) of file {previous.name} had are missing")
    if holes:
        reasons.append(f"{len(holes)} shard(s) missing from the rank grid")
    if ratio is not None and ratio < min_ratio:
        reasons.append(f"{ratio:.0%} of {previous.name}'s size (under {min_ratio:.0%})")
    reasons += _thin_directories(new, old, min_ratio)
    proof = (f"compared with {previous.name} ({len(previous.files)} files, {previous.size} bytes): "
             + ("; ".join(reasons) if reasons else "every kind of file is there, at a comparable size")
             + f" ({WHY_IT_COULD_BE_WRONG})")
    return Verdict(not reasons, COMPARISON, (proof,), tuple(reasons), tuple(missing + holes), ratio,
                   "; ".join(resized) or None)


def _thin_directories(new: dict[str, _Family], old: dict[str, _Family], min_ratio: float) -> list[str]:
    """Directories of content-addressed files hold different names in every save: their bytes are compared."""
    reasons = []
    for template in sorted(t for t in old if "{id}" in t and t in new):
        before, after = old[template].size, new[template].size
        if before and after / before < min_ratio:
            where = template.rsplit("/", 1)[0] if "/" in template else "the top level"
            reasons.append(f"the content-addressed files in {where} hold {after / before:.0%} of the bytes they "
                           f"held before (under {min_ratio:.0%})")
    return reasons


def _span(family: _Family) -> str:
    """'8 ranks', or '8x2 ranks' where names carry two rank numbers (ZeRO data-parallel x model-parallel)."""
    return "x".join(str(n) for n in family.extent()) + " ranks"
