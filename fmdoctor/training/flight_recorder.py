"""PyTorch's NCCL flight recorder dumps: which ranks never reached the collective the others wait at.

With ``TORCH_NCCL_TRACE_BUFFER_SIZE=2000`` and ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` every rank writes one file on a
watchdog timeout, named ``<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>`` (default ``/tmp/nccl_trace_rank_``; newer
releases also read ``TORCH_FR_DUMP_TEMP_FILE``). The file is a pickled dict (pytorch/pytorch
``torch/csrc/distributed/c10d/FlightRecorder.hpp`` keys; format shown in the PyTorch tutorial "Flight Recorder
for Debugging"): ``version``, ``pg_config`` (group name -> ``name``, ``desc``, ``ranks`` as "[0, 1]"),
``pg_status`` (pg id -> ``last_enqueued_collective``, ``last_started_collective``, ``last_completed_collective``)
and ``entries`` (``pg_id``, ``process_group`` (name, desc), ``collective_seq_id``, ``profiling_name``,
``state``, ``time_created_ns``...). ``tools/flight_recorder`` reads the rank from the file name the same way.

The pickle is written by c10d's IValue pickler without type tags, so it holds only dicts, lists, tuples,
strings, numbers and None: it is loaded with an unpickler that refuses every global, never ``pickle.load``.
JSON dumps (``dump_json``) are read as JSON.
"""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PREFIX = "nccl_trace_rank_"
MAX_DUMP_BYTES = 64 * 1024 * 1024


class DumpError(Exception):
    """A file that is not a flight recorder dump (or holds anything but plain data)."""


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise DumpError(f"a flight recorder dump holds plain data only; this one names {module}.{name}")


def load_dump(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(f"{len(data)} bytes, more than a flight recorder dump of 2000 entries holds")
    try:
        dump = json.loads(data) if data.lstrip()[:1] == b"{" else _PlainDataUnpickler(io.BytesIO(data)).load()
    except DumpError:
        raise
    except Exception as exc:  # a truncated upload, another file beside the dumps
        raise DumpError(f"not a flight recorder dump ({type(exc).__name__})") from None
    if not isinstance(dump, dict) or "entries" not in dump:
        raise DumpError("not a flight recorder dump (no 'entries')")
    return dump


def rank_of(file_name: str, prefix: str) -> int | None:
    base = file_name.rsplit("/", 1)[-1]
    if not base.startswith(prefix):
        return None
    rest = base[len(prefix):].split(".")[0]  # 'nccl_trace_rank_13', or with an extension a copy added
    return int(rest) if rest.isdigit() else None


@dataclass(frozen=True)
class GroupProgress:
    """One rank's place in one process group."""

    last_enqueued: int
    last_completed: int
    stuck_op: str | None = None  # profiling_name of the entry at last_enqueued, when still in the buffer
    stuck_state: str | None = None
    stuck_created_ns: int | None = None


@dataclass
class RankDump:
    rank: int
    source: str
    groups: dict[str, GroupProgress] = field(default_factory=dict)  # by group name ('0', 'default_pg'...)
    members: dict[str, list[int]] = field(default_factory=dict)  # group -> global ranks (pg_config)


def parse_dump(rank: int, source: str, dump: dict[str, Any]) -> RankDump:
    out = RankDump(rank, source)
    for name, config in (dump.get("pg_config") or {}).items():
        ranks = config.get("ranks") if isinstance(config, dict) else None
        try:
            out.members[str(name)] = [int(r) for r in (json.loads(ranks) if isinstance(ranks, str) else ranks or [])]
        except (ValueError, TypeError):
            continue
    names: dict[str, str] = {}  # pg_id -> group name, from the entries
    latest: dict[str, dict[str, Any]] = {}
    for entry in dump.get("entries") or []:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        group = entry.get("process_group")
        name = str(group[0]) if isinstance(group, (list, tuple)) and group else str(entry.get("pg_id", "0"))
        names[str(entry.get("pg_id", name))] = name
        if int(entry.get("collective_seq_id") or 0) >= int(latest.get(name, {}).get("collective_seq_id") or 0):
            latest[name] = entry
    status = dump.get("pg_status") or {}
    for pg_id, values in status.items():
        if not isinstance(values, dict):
            continue
        name = names.get(str(pg_id), str(pg_id))
        out.groups[name] = _progress(int(values.get("last_enqueued_collective", -1)),
                                     int(values.get("last_completed_collective", -1)), latest.get(name))
    for name, entry in latest.items():  # dumps older than pg_status (version < 2.4): the entries alone
        if name not in out.groups:
            seq = int(entry.get("collective_seq_id") or 0)
            completed = seq if entry.get("state") == "completed" else seq - 1
            out.groups[name] = _progress(seq, completed, entry)
    return out


def _progress(enqueued: int, completed: int, entry: dict[str, Any] | None) -> GroupProgress:
    if entry is None or int(entry.get("collective_seq_id") or -1) != enqueued:
        return GroupProgress(enqueued, completed)
    return GroupProgress(enqueued, completed, entry.get("profiling_name"), entry.get("state"),
                         entry.get("time_created_ns"))


@dataclass(frozen=True)
class Laggards:
    """In one process group: the collective the leaders wait at, and who never reached it."""

    group: str
    waiting_at: int
    stuck_op: str | None
    waiting_ranks: tuple[int, ...]
    behind: dict[int, int]  # rank -> its last enqueued collective
    missing: tuple[int, ...]  # members with no dump at all
    stuck_since_ns: int | None


def find_laggards(dumps: list[RankDump]) -> list[Laggards]:
    """Per group, the ranks whose last enqueued collective is below the highest any member enqueued while that
    collective never completed anywhere: the ranks the rest of the group waits for."""
    found = []
    groups = sorted({name for d in dumps for name in d.groups})
    for name in groups:
        progress = {d.rank: d.groups[name] for d in dumps if name in d.groups}
        head = max(p.last_enqueued for p in progress.values())
        if all(p.last_completed >= head for p in progress.values()):
            continue  # the group's newest collective completed everywhere: nothing waits in it
        members = next((d.members[name] for d in dumps if d.members.get(name)), [])
        behind = {rank: p.last_enqueued for rank, p in progress.items() if p.last_enqueued < head}
        missing = tuple(sorted(set(members) - set(progress)))
        if not behind and not missing:
            continue
        leaders = {rank: p for rank, p in progress.items() if p.last_enqueued == head}
        stuck = next((p for p in leaders.values() if p.stuck_op), None)
        created = [p.stuck_created_ns for p in leaders.values() if p.stuck_created_ns]
        found.append(Laggards(name, head, stuck.stuck_op if stuck else None, tuple(sorted(leaders)), behind,
                              missing, min(created) if created else None))
    return found
