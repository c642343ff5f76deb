"""The fallback where a framework leaves no marker: compare a checkpoint with its predecessor.

Files are grouped into families by name with their rank numbers and the checkpoint's own step masked
(``zero_pp_rank_{r}_mp_rank_{r}_optim_states.pt``, ``model_{step}.pt``). A family the predecessor had and
this one lacks is missing; within a family the ranks must form a whole grid (0..n-1 in every position), so a
hole is a missing shard. A family whose ranks span a different range is a change of world size (an elastic
job resumed on fewer nodes writes fewer shards): that is healthy and never counted as missing files. The total
size is compared either way, since resharding does not change how much state there is.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from fmdoctor.checkpoints.model import COMPARISON, Checkpoint, Verdict

# A rank number: after 'rank' (zero_pp_rank_3, mp_rank_00, rank7), 'rng_state_' (HF per-process RNG state)
# or the '__' of a DCP shard ('__12_0.distcp').
_RANK = re.compile(r"(rank[_-]?|rng_state_|(?:^|/)__)(\d+)", re.I)
_MAX_GRID = 100_000  # a grid larger than this is not a rank layout: only its families are compared


@dataclass(frozen=True)
class _Family:
    template: str
    ranks: dict[tuple[int, ...], str]  # rank tuple -> the file's name
    widths: tuple[int, ...]  # zero padding of each rank position, to name missing files as the writer would

    def extent(self) -> tuple[int, ...]:
        return tuple(max(r[i] for r in self.ranks) + 1 for i in range(len(self.widths)))

    def holes(self) -> list[str]:
        if not self.widths:
            return []
        extent = self.extent()
        size = 1
        for n in extent:
            size *= n
        if size > _MAX_GRID:
            return []
        return [self.name(r) for r in itertools.product(*(range(n) for n in extent)) if r not in self.ranks]

    def name(self, ranks: tuple[int, ...]) -> str:
        numbers = iter(f"{r:0{w}d}" for r, w in zip(ranks, self.widths, strict=True))
        return re.sub(r"\{rank\}", lambda _: next(numbers), self.template)


def families(checkpoint: Checkpoint) -> dict[str, _Family]:
    own_step = re.compile(rf"(?<!\d)0*{checkpoint.step}(?!\d)") if checkpoint.step is not None else None
    found: dict[str, _Family] = {}
    for f in checkpoint.files:
        numbers = [m.group(2) for m in _RANK.finditer(f.key)]
        template = _RANK.sub(lambda m: m.group(1) + "{rank}", f.key)  # ranks first: a rank may equal the step
        template = own_step.sub("{step}", template) if own_step else template
        family = found.setdefault(template, _Family(template, {}, tuple(len(n) for n in numbers)))
        family.ranks[tuple(int(n) for n in numbers)] = f.key
    return found


def compare(newest: Checkpoint, previous: Checkpoint, min_ratio: float) -> Verdict:
    """Whether ``newest`` has every kind of file ``previous`` had, whole rank grids, and enough of its size."""
    new, old = families(newest), families(previous)
    missing = sorted(next(iter(old[t].ranks.values())) for t in old.keys() - new.keys())
    holes = sorted(name for family in new.values() for name in family.holes())
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
    proof = (f"compared with {previous.name} ({len(previous.files)} files, {previous.size} bytes): "
             + ("; ".join(reasons) if reasons else "every kind of file is there, at a comparable size"))
    return Verdict(not reasons, COMPARISON, (proof,), tuple(reasons), tuple(missing + holes), ratio,
                   "; ".join(resized) or None)


def _span(family: _Family) -> str:
    """'8 ranks', or '8x2 ranks' where names carry two rank numbers (ZeRO data-parallel x model-parallel)."""
    return "x".join(str(n) for n in family.extent()) + " ranks"
