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
Before it is loaded its opcodes are walked once (:func:`check_opcodes`), bounding what the C unpickler would
allocate: a memo index must be one a pickler would write (at most the number of memo entries so far: a 9-byte
pickle naming index 2^25 would otherwise cost 510 MiB), the stack (nesting and marks) at most ``MAX_STACK``
deep, the container items at most ``MAX_ITEMS`` in all, and the objects created at most ``MAX_OBJECTS`` (each
kept alive by the memo: 3 bytes of ``}\x940`` would otherwise build a 64-byte dict, a 64 MiB file 1.4 GiB of
them). Sets, which neither c10d nor a dict of plain data holds (216 bytes for 3), are refused. JSON dumps
(``dump_json``) are read as JSON.
"""

from __future__ import annotations

import io
import json
import pickle
import pickletools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DEFAULT_PREFIX = "nccl_trace_rank_"
MAX_DUMP_BYTES = 64 * 1024 * 1024
MAX_STACK = 100_000  # items and marks on the unpickler's stack at once (nesting, one batch of a container)
MAX_MARKS = 1_000  # open MARKs: containers nested inside containers being built
MAX_ITEMS = 4_000_000  # items added to lists, dicts and tuples in all (2000 entries with their frames: ~10^5)
MAX_OBJECTS = 4_000_000  # objects built in all (2000 entries with 64 frames each: ~550,000)
MAX_RANK_DIGITS = 7
_SETS = {"EMPTY_SET", "ADDITEMS", "FROZENSET"}
_NOT_NEW = {"MARK", "DUP", "GET", "BINGET", "LONG_BINGET", "PROTO", "FRAME", "STOP", "MEMOIZE", "APPEND",
            "APPENDS", "SETITEM", "SETITEMS", "BUILD"}  # push nothing new (or the object they were given)
_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_ADDS = {"APPEND": 1, "SETITEM": 1, "TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


class DumpError(Exception):
    """A file that is not a flight recorder dump (or holds anything but plain data)."""


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise DumpError(f"a flight recorder dump holds plain data only; this one names {module}.{name}")


def check_opcodes(data: bytes) -> None:
    """Walk the pickle's opcodes (nothing is built) and refuse one whose loading would allocate out of bounds."""
    memo = depth = items = objects = 0
    marks: list[int] = []
    try:
        for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
            name = opcode.name
            if name in _SETS:
                raise DumpError(f"a set ({name}): a flight recorder dump holds dicts, lists, tuples and scalars")
            if opcode.stack_after and name not in _NOT_NEW:
                objects += 1
                if objects > MAX_OBJECTS:
                    raise DumpError(f"more than {MAX_OBJECTS} objects")
            if name in _PUTS:
                if int(arg) > memo:  # a pickler numbers its memo entries 0, 1, 2...
                    raise DumpError(f"memo index {arg} with {memo} entries: not a pickler's output")
                memo += 1
            elif name == "MEMOIZE":
                memo += 1
            elif name in _GETS and int(arg) >= memo:
                raise DumpError(f"memo index {arg} read before it was written")
            before = opcode.stack_before
            if name == "MARK":
                marks.append(depth)
            elif name == "POP" and marks and marks[-1] == depth:
                marks.pop()
            elif pickletools.stackslice in before:  # APPENDS, SETITEMS, TUPLE, DICT...: everything since the mark
                start = marks.pop() if marks else 0
                items += depth - start
                depth = start - (len(before) - 2)
            else:
                items += _ADDS.get(name, 0)
                depth -= len(before)
            if name != "MARK":
                depth += len(opcode.stack_after)
            if depth + len(marks) > MAX_STACK or len(marks) > MAX_MARKS:
                raise DumpError(f"nested or batched past the bounds ({depth} stack slots of {MAX_STACK}, "
                                f"{len(marks)} open marks of {MAX_MARKS})")
            if items > MAX_ITEMS:
                raise DumpError(f"more than {MAX_ITEMS} container items")
    except DumpError:
        raise
    except Exception as exc:  # truncated, an unknown opcode
        raise DumpError(f"not a flight recorder dump ({type(exc).__name__})") from None


def load_dump(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_DUMP_BYTES:
        raise DumpError(f"{len(data)} bytes, more than a flight recorder dump of 2000 entries holds")
    try:
        if data.lstrip()[:1] == b"{":
            dump = json.loads(data)
        else:
            check_opcodes(data)
            dump = _PlainDataUnpickler(io.BytesIO(data)).load()
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
    ok = rest.isascii() and rest.isdigit() and len(rest) <= MAX_RANK_DIGITS  # not '²', not 10^5000
    return int(rest) if ok else None


def is_dump_name(file_name: str, prefix: str) -> bool:
    """A file the prefix names as a dump (its rank may still be unreadable: then it is one unreadable dump)."""
    base = file_name.rsplit("/", 1)[-1]
    return base.startswith(prefix) and len(base) > len(prefix)


@dataclass(frozen=True)
class GroupProgress:
    """One rank's place in one process group."""

    last_enqueued: int
    last_completed: int
    stuck_op: str | None = None  # profiling_name of the entry at last_enqueued, when still in the buffer
    stuck_state: str | None = None
    stuck_created_ns: int | None = None


@dataclass(frozen=True)
class Op:
    """One collective of a rank's ring buffer."""

    name: str | None  # profiling_name ('nccl:all_reduce')
    state: str | None  # 'scheduled' | 'started' | 'completed'
    created_ns: int | None


@dataclass
class RankDump:
    rank: int
    source: str
    groups: dict[str, GroupProgress] = field(default_factory=dict)  # by group name ('0', 'default_pg'...)
    members: dict[str, list[int]] = field(default_factory=dict)  # group -> global ranks (pg_config)
    descs: dict[str, str] = field(default_factory=dict)  # group name -> its description ('default_pg')
    ops: dict[str, dict[int, Op]] = field(default_factory=dict)  # group -> collective_seq_id -> the entry
    written: datetime | None = None  # when the object was stored (S3 LastModified)


def of_the_run(dumps: list[RankDump], since: datetime | None) -> tuple[list[RankDump], int]:
    """The dumps of the hang being judged, and how many others were left out: per rank its newest dump (a prefix
    over several jobs' directories, a rank dumped twice), none stored before ``since`` (where the run that hung
    began to time out: PyTorch writes a rank's dump on its watchdog's timeout, so an older one is another hang's)."""
    newest: dict[int, RankDump] = {}
    for dump in dumps:
        if since is not None and dump.written is not None and dump.written < since:
            continue
        kept = newest.get(dump.rank)
        if kept is None or (dump.written is not None and (kept.written is None or dump.written >= kept.written)):
            newest[dump.rank] = dump
    return list(newest.values()), len(dumps) - len(newest)


def parse_dump(rank: int, source: str, dump: dict[str, Any]) -> RankDump:
    """The progress one rank's dump records. The dump is plain data of any shape its writer chose: every value
    read here is checked for the type c10d writes (a mapping, an int64 counter, a short name), and one that is
    not makes the whole dump a :class:`DumpError` (one unreadable dump, never an error of the check)."""
    try:
        return _parse(rank, source, dump)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise DumpError(f"not a flight recorder dump ({type(exc).__name__} in its fields)") from None


def _parse(rank: int, source: str, dump: dict[str, Any]) -> RankDump:
    out = RankDump(rank, source)
    for name, config in _mapping(dump.get("pg_config"), "pg_config").items():
        ranks = config.get("ranks") if isinstance(config, dict) else None
        desc = _short_text(config.get("desc"), "pg_config desc") if isinstance(config, dict) else None
        if desc is not None:
            out.descs[_name(name, "pg_config")] = desc
        try:
            listed = json.loads(ranks) if isinstance(ranks, str) else ranks or []
            out.members[_name(name, "pg_config")] = [_counter(r, "a rank") for r in _sequence(listed, "ranks")]
        except (ValueError, RecursionError, DumpError):
            continue
    names: dict[str, str] = {}  # pg_id -> group name, from the entries
    latest: dict[str, dict[str, Any]] = {}
    for entry in _sequence(dump.get("entries"), "entries"):
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        group = entry.get("process_group")
        pg_id = _name(entry.get("pg_id", 0), "pg_id")
        name = _name(group[0], "process_group") if isinstance(group, (list, tuple)) and group else pg_id
        if isinstance(group, (list, tuple)) and len(group) > 1:
            desc = _short_text(group[1], "process_group")
            if desc is not None:
                out.descs.setdefault(name, desc)
        names[pg_id] = name
        seq = _seq(entry)
        created = entry.get("time_created_ns")
        out.ops.setdefault(name, {})[seq] = Op(_short_text(entry.get("profiling_name"), "profiling_name"),
                                               _short_text(entry.get("state"), "state"),
                                               None if created is None else _counter(created, "time_created_ns"))
        if seq >= (_seq(latest[name]) if name in latest else 0):
            latest[name] = entry
    for pg_id, values in _mapping(dump.get("pg_status"), "pg_status").items():
        if not isinstance(values, dict):
            continue
        name = names.get(_name(pg_id, "pg_status"), _name(pg_id, "pg_status"))
        out.groups[name] = _progress(_counter(values.get("last_enqueued_collective", -1), "last_enqueued_collective"),
                                     _counter(values.get("last_completed_collective", -1),
                                              "last_completed_collective"), latest.get(name))
    for name, entry in latest.items():  # dumps older than pg_status (version < 2.4): the entries alone
        if name not in out.groups:
            seq = _seq(entry)
            completed = seq if entry.get("state") == "completed" else seq - 1
            out.groups[name] = _progress(seq, completed, entry)
    return out


def _progress(enqueued: int, completed: int, entry: dict[str, Any] | None) -> GroupProgress:
    if entry is None or _seq(entry, -1) != enqueued:
        return GroupProgress(enqueued, completed)
    created = entry.get("time_created_ns")
    return GroupProgress(enqueued, completed, _short_text(entry.get("profiling_name"), "profiling_name"),
                         _short_text(entry.get("state"), "state"),
                         None if created is None else _counter(created, "time_created_ns"))


_INT64 = 1 << 63
MAX_NAME_CHARS = 256


def _counter(value: Any, what: str) -> int:
    """c10d's counters and ranks are int64 (a JSON dump may write them as decimal strings)."""
    if isinstance(value, str) and value.lstrip("-").isascii() and value.lstrip("-").isdigit() and len(value) <= 20:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -_INT64 <= value < _INT64:
        raise DumpError(f"{what} is not a 64-bit integer ({type(value).__name__})")
    return value


def _seq(entry: dict[str, Any], default: int = 0) -> int:
    """An entry's collective_seq_id; ``default`` for none (or 0, which c10d writes for a p2p entry)."""
    value = entry.get("collective_seq_id")
    return default if value is None else _counter(value, "collective_seq_id") or default


def _name(value: Any, what: str) -> str:
    """A process group's name or id: a short string or an int64."""
    if isinstance(value, str) and len(value) <= MAX_NAME_CHARS:
        return value
    return str(_counter(value, f"{what} name"))


def _short_text(value: Any, what: str) -> str | None:
    """An operation's name or state, as the report will quote it (c10d writes a string or nothing)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise DumpError(f"{what} is a {type(value).__name__}, not a string")
    return value[:MAX_NAME_CHARS]


def _mapping(value: Any, what: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DumpError(f"{what} is a {type(value).__name__}, not a mapping")
    return value


def _sequence(value: Any, what: str) -> list[Any] | tuple[Any, ...]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise DumpError(f"{what} is a {type(value).__name__}, not a list")
    return value


@dataclass(frozen=True)
class Laggards:
    """In one process group: the collective the waiting ranks are stuck in, and who never reached it."""

    group: str
    waiting_at: int
    stuck_op: str | None
    waiting_ranks: tuple[int, ...]
    behind: dict[int, int]  # rank -> its last enqueued collective
    missing: tuple[int, ...]  # members with no dump at all
    stuck_since_ns: int | None
    desc: str | None = None  # the group's description ('default_pg')


def find_laggards(dumps: list[RankDump], named: Mapping[str, int] | None = None) -> list[Laggards]:
    """Per group, the collective the waiting ranks are stuck in and the ranks that never enqueued it.

    The waiting point is the collective the NCCL watchdog named for the group (``named``: group name or description
    -> SeqNum) where it did; else the oldest collective a rank enqueued but never completed (ranks may have
    enqueued more behind it: the newest enqueued is not where they wait). A rank whose last enqueued collective is
    below it never reached it (the analyser ``torch/distributed/flight_recorder`` reports these as ranks not joining
    the collective)."""
    found = []
    groups = sorted({name for d in dumps for name in d.groups})
    for name in groups:
        progress = {d.rank: d.groups[name] for d in dumps if name in d.groups}
        desc = next((d.descs[name] for d in dumps if d.descs.get(name)), None)
        pending = [p.last_completed + 1 for p in progress.values() if p.last_enqueued > p.last_completed]
        waiting_at = next((named[k] for k in (name, desc) if k is not None and named and k in named),
                          min(pending, default=None))
        if waiting_at is None:
            continue  # every rank completed all it enqueued: nothing waits in this group
        leaders = {rank: p for rank, p in progress.items()
                   if p.last_enqueued >= waiting_at and p.last_completed < waiting_at}
        if not leaders:
            continue
        members = next((d.members[name] for d in dumps if d.members.get(name)), [])
        behind = {rank: p.last_enqueued for rank, p in progress.items() if p.last_enqueued < waiting_at}
        missing = tuple(sorted(set(members) - set(progress)))
        if not behind and not missing:
            continue
        ops = [d.ops.get(name, {}).get(waiting_at) for d in dumps if d.rank in leaders]
        op = next((o for o in ops if o is not None and o.name), None)
        created = [o.created_ns for o in ops if o is not None and o.created_ns]
        found.append(Laggards(name, waiting_at, op.name if op else None, tuple(sorted(leaders)), behind,
                              missing, min(created) if created else None, desc))
    return found
