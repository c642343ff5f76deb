"""Each framework's own proof that a save finished, read from listings only (names, sizes, write times).

Every rule follows the framework's writer, never a guess about it:

- PyTorch DCP (torch.distributed.checkpoint, also under torchtitan, Megatron's ``torch_dist`` format, NeMo 2's
  ``weights/`` and Lightning's sharded FSDP saves): every rank writes ``__<rank>_<n>.distcp``, then the
  coordinator's ``StorageWriter.finish`` writes ``.metadata`` (to ``.metadata.tmp``, renamed when whole).
  No ``.metadata`` beside the shards: the save died before it finished. Loading reads ``.metadata`` first.
  Source: pytorch ``torch/distributed/checkpoint/filesystem.py`` (``_FileSystemWriter.finish``,
  ``prepare_global_plan``'s ``__{i}_`` prefixes) and ``state_dict_saver.py``.
- DeepSpeed: ``save_checkpoint`` writes ``<tag>/`` (``mp_rank_XX_model_states.pt``,
  ``[bf16_]zero_pp_rank_<dp>_mp_rank_XX_optim_states.pt``) on every rank, then rank 0 rewrites the ``latest``
  file beside the tags; ``load_checkpoint`` resumes from the tag ``latest`` names. Without s3:GetObject the
  tag inside is unreadable, so the proof is its write time: a tag whose save began after ``latest`` was last
  rewritten is not committed. Source: deepspeedai/DeepSpeed ``deepspeed/runtime/engine.py``
  (``save_checkpoint``, ``_get_ckpt_name``, ``_get_zero_ckpt_name``).
- Megatron-LM: after a barrier, rank 0 writes ``latest_checkpointed_iteration.txt`` beside ``iter_XXXXXXX/``;
  the same write-time rule. Source: NVIDIA/Megatron-LM ``megatron/training/checkpointing.py``
  (``save_checkpoint``, ``get_checkpoint_tracker_filename``).
- NeMo 2: ``ModelCheckpoint._save_checkpoint`` touches ``<checkpoint>-unfinished`` beside the checkpoint
  before saving and removes it when every rank is done; AutoResume skips marked ones. Source: NVIDIA/NeMo
  ``nemo/lightning/pytorch/callbacks/model_checkpoint.py``.
- Hugging Face Trainer: ``_save_checkpoint`` writes ``trainer_state.json`` last into ``checkpoint-<step>/``;
  transformers 4.36-4.37 staged saves in ``tmp-checkpoint-<step>/`` and renamed them when whole, and
  ``get_last_checkpoint`` only ever loads ``checkpoint-<step>`` (``^checkpoint-(\\d+)$``). Source:
  huggingface/transformers ``src/transformers/trainer.py``, ``trainer_utils.py``; PRs #28364, #28848.
- Lightning: ``ModelCheckpoint`` saves each ``.ckpt`` through ``_atomic_save`` (one fsspec transaction), then
  ``last.ckpt`` (a copy, or with ``save_last="link"`` a symlink to the newest save). Source:
  Lightning-AI/pytorch-lightning ``src/lightning/pytorch/callbacks/model_checkpoint.py`` and
  ``src/lightning/fabric/utilities/cloud_io.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fmdoctor.checkpoints.model import MARKER, UNPROVEN, Checkpoint, StoredObject, Verdict

DCP_METADATA = ".metadata"
DCP_SHARD = re.compile(r"^__(\d+)_(\d+)\.distcp$")
DEEPSPEED_POINTER = "latest"
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
NEMO_UNFINISHED = "-unfinished"
HF_STATE = "trainer_state.json"
HF_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
HF_STAGING = re.compile(r"^tmp-checkpoint-")
LIGHTNING_LAST = re.compile(r"^last(-v\d+)?\.ckpt$")
DEEPSPEED_SHARD = re.compile(r"(^|/)(bf16_)?(zero_pp_rank_\d+_)?mp_rank_\d+(_\d+)?_(model|optim)_states\.pt$")
POINTERS = {DEEPSPEED_POINTER: "DeepSpeed's 'latest' file", MEGATRON_TRACKER: "Megatron's tracker file"}


@dataclass(frozen=True)
class LocationMarkers:
    """What a location's top level says beside its checkpoints."""

    pointers: dict[str, StoredObject] = field(default_factory=dict)  # 'latest' / the tracker file
    unfinished: dict[str, StoredObject] = field(default_factory=dict)  # checkpoint name -> its NeMo marker
    links: dict[str, str] = field(default_factory=dict)  # symlink name -> target (local paths)

    def is_marker(self, name: str) -> bool:
        return name in self.pointers or name.endswith(NEMO_UNFINISHED)


def location_markers(files: list[StoredObject]) -> LocationMarkers:
    markers = LocationMarkers()
    for obj in files:
        if obj.link_target is not None:
            markers.links[obj.key] = obj.link_target.rstrip("/").rsplit("/", 1)[-1]
        elif obj.key in POINTERS:
            markers.pointers[obj.key] = obj
        elif obj.key.endswith(NEMO_UNFINISHED):
            markers.unfinished[obj.key.removesuffix(NEMO_UNFINISHED)] = obj
    return markers


def unfinished_marker(markers: LocationMarkers, name: str) -> StoredObject | None:
    """NeMo's marker for a checkpoint: its path without '.ckpt' (and '-EMA') plus '-unfinished'."""
    return markers.unfinished.get(name.removesuffix(".ckpt").removesuffix("-EMA"))


def is_staging(name: str) -> bool:
    """A Hugging Face Trainer staging folder: never loaded, renamed to checkpoint-<step> when whole."""
    return bool(HF_STAGING.match(name))


def judge(checkpoint: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool = True) -> Verdict:
    """Every framework proof that applies to ``checkpoint``: incomplete if any fails, complete if one holds,
    else undecided (``complete=None``: fall back to a comparison, or to nothing)."""
    held: list[str] = []
    failed: list[str] = []
    for proof in (_staging, _nemo, _dcp, _nested_deepspeed, _hf_trainer, _pointer, _lightning_file):
        result = proof(checkpoint, markers, hf_trainer, top_level)
        if result is None:
            continue
        ok, sentence = result
        (held if ok else failed).append(sentence)
    if failed:
        return Verdict(False, MARKER, tuple(held), tuple(failed))
    if held:
        return Verdict(True, MARKER, tuple(held))
    return Verdict(None, UNPROVEN)


Result = tuple[bool, str] | None


def _staging(cp: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool) -> Result:
    if not is_staging(cp.name):
        return None
    return False, (f"{cp.name} is Hugging Face Trainer's staging folder: Trainer renames it to "
                   "checkpoint-<step> only when the save is whole, and never loads it")


def _nemo(cp: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool) -> Result:
    marker = unfinished_marker(markers, cp.name)
    if marker is not None:
        return False, (f"NeMo's marker {marker.key} (touched {marker.last_modified.isoformat()}) is still there: "
                       "ModelCheckpoint removes it only when every rank has finished the save")
    folders = {f.key.split("/", 1)[0] for f in cp.files if "/" in f.key}
    if {"weights", "context"} <= folders:
        return True, f"NeMo checkpoint {cp.name} has no '-unfinished' marker beside it"
    return None


def _dcp(cp: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool) -> Result:
    shards: dict[str, set[int]] = {}
    metadata: set[str] = set()
    for f in cp.files:
        folder, _, name = f.key.rpartition("/")
        if (match := DCP_SHARD.match(name)) is not None:
            shards.setdefault(folder, set()).add(int(match.group(1)))
        elif name == DCP_METADATA:
            metadata.add(folder)
    if not shards:
        return None
    where = ", ".join(f"{folder}/" if folder else cp.name for folder in sorted(shards))
    lacking = sorted(folder for folder in shards if folder not in metadata)
    if lacking:
        place = ", ".join(f"{folder}/" for folder in lacking if folder) or cp.name
        return False, (f"no .metadata beside the PyTorch DCP shards in {place}: the save died before "
                       "StorageWriter.finish, which writes it last, once every rank is done")
    holes = {folder: sorted(set(range(max(ranks) + 1)) - ranks) for folder, ranks in shards.items()}
    holes = {folder: missing for folder, missing in holes.items() if missing}
    if holes:
        folder, missing = next(iter(sorted(holes.items())))
        return False, (f"PyTorch DCP .metadata is there but the shards of rank(s) {_ranks(missing)} are not "
                       f"(in {folder or cp.name}): this copy of the save is still arriving or lost files")
    ranks = max(len(r) for r in shards.values())
    return True, f"PyTorch DCP .metadata written beside {ranks} rank(s) of shards in {where}"


def _nested_deepspeed(cp: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool) -> Result:
    """DeepSpeed saved inside a framework's checkpoint folder (HF Trainer, Lightning): its own 'latest'."""
    shards = [f for f in cp.files if "/" in f.key and DEEPSPEED_SHARD.search(f.key)]
    pointer = next((f for f in cp.files if f.key == DEEPSPEED_POINTER), None)
    if not shards or pointer is None:
        return None
    began = min(f.last_modified for f in shards)
    if pointer.last_modified >= began:
        return True, f"DeepSpeed's 'latest' inside {cp.name} was rewritten after its shards were saved"
    return False, (f"DeepSpeed's 'latest' inside {cp.name} is older than its shards: the save died before "
                   "rank 0 rewrote it")


def _hf_trainer(cp: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool) -> Result:
    if not hf_trainer or not HF_CHECKPOINT.match(cp.name):
        return None
    if any(f.key == HF_STATE for f in cp.files):
        return True, f"Hugging Face Trainer wrote {HF_STATE}, its last file, into {cp.name}"
    return False, f"no {HF_STATE} in {cp.name}: Trainer._save_checkpoint writes it last, so the save did not finish"


def _pointer(cp: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool) -> Result:
    if not top_level or not cp.files or (cp.files[0].key == cp.name and len(cp.files) == 1):
        return None  # a single-file checkpoint is no DeepSpeed tag or Megatron iteration folder
    name, pointer = _pointer_for(cp, markers)
    if pointer is None:
        return None
    label = POINTERS[name]
    began = cp.first_modified
    if pointer.last_modified >= began:
        return True, (f"{label} was rewritten at {pointer.last_modified.isoformat()}, after the save of "
                      f"{cp.name} began ({began.isoformat()})")
    return False, (f"the save of {cp.name} began at {began.isoformat()}, after {label} was last rewritten "
                   f"({pointer.last_modified.isoformat()}): the framework rewrites it only once every rank has "
                   "saved, and resumes from what it names")


def _pointer_for(cp: Checkpoint, markers: LocationMarkers) -> tuple[str, StoredObject | None]:
    if MEGATRON_TRACKER in markers.pointers and cp.name.startswith("iter_"):
        return MEGATRON_TRACKER, markers.pointers[MEGATRON_TRACKER]
    return DEEPSPEED_POINTER, markers.pointers.get(DEEPSPEED_POINTER)


def _lightning_file(cp: Checkpoint, markers: LocationMarkers, hf_trainer: bool, top_level: bool) -> Result:
    if len(cp.files) == 1 and cp.files[0].key == cp.name and cp.name.endswith(".ckpt"):
        return True, f"Lightning writes each .ckpt file in one transaction (_atomic_save), so {cp.name} is whole"
    return None


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:5])
    return shown + (f" and {len(ranks) - 5} more" if len(ranks) > 5 else "")
