"""Each framework's own proof that a save finished, read from listings only (names, sizes, write times).

Every rule follows the framework's writer, never a guess about it (the README's checkpoint table lists them):

- PyTorch DCP (torch.distributed.checkpoint, also under torchtitan, Megatron's ``torch_dist`` format, NeMo 2's
  ``weights/``, Composer's sharded saves, Accelerate's FSDP saves and Lightning's sharded FSDP saves): every rank
  writes ``__<rank>_<n>.distcp``, then the coordinator's ``StorageWriter.finish`` writes ``.metadata`` (to
  ``.metadata.tmp``, renamed when whole). No ``.metadata`` beside the shards: the save died before it finished.
  A rank with no shard file beside ``.metadata`` proves nothing either way (Megatron Core's
  ``FileSystemWriterAsync`` writes no file for a rank with nothing to save; a synced copy may still be
  arriving): the comparison, a hint, judges it. Source: NVIDIA/Megatron-LM
  ``megatron/core/dist_checkpointing/strategies/filesystem_async.py`` (``has_data_to_write``, ``preload_tensors``).
  Source: pytorch ``torch/distributed/checkpoint/filesystem.py`` (``_FileSystemWriter.finish``,
  ``prepare_global_plan``'s ``__{i}_`` prefixes) and ``state_dict_saver.py``.
- torchtitan: ``step-<N>/`` is loadable when it holds DCP's ``.metadata`` or, for a Hugging Face export,
  ``model.safetensors.index.json``. Source: pytorch/torchtitan ``torchtitan/components/checkpointer/dcp.py``
  (``_find_load_step``, ``_create_checkpoint_id``).
- Sharded safetensors (``model-00001-of-00004.safetensors``, written by transformers ``save_pretrained`` and by
  DCP's ``HuggingFaceStorageWriter``): the name carries the shard count, and the ``.index.json`` is written
  after the shards. With ``save_distributed`` every rank writes its pieces as
  ``shard-<rank>-model-<i>-of-<K>.safetensors`` (under ``sharded/`` when consolidating, left there) and no index
  is ever written for them: they prove nothing either way. Source: huggingface/transformers ``modeling_utils.py``
  (``save_pretrained``); pytorch ``torch/distributed/checkpoint/hf_storage.py`` (``finish``), ``_hf_utils.py``
  (``SHARDED_FILE_NAME``, ``SHARDED_DIR_NAME``), ``_consolidate_hf_safetensors.py``.
- Megatron Core dist-checkpointing (``torch_dist``, NeMo 2's ``weights/``): ``save`` writes ``common.pt``
  first and ``metadata.json`` last, in its finalize step, "so that metadata.json is written only if the
  checkpoint is complete". Source: NVIDIA/Megatron-LM ``megatron/core/dist_checkpointing/serialization.py``.
- DeepSpeed: ``save_checkpoint`` writes ``<tag>/`` on every rank, then rank 0 rewrites the ``latest`` file beside
  the tags; ``load_checkpoint`` resumes from the tag ``latest`` names. Without s3:GetObject the tag inside is
  unreadable, so the proof is its write time: a tag whose save began after ``latest`` was last rewritten is not
  committed. Source: deepspeedai/DeepSpeed ``deepspeed/runtime/engine.py`` (``save_checkpoint``). A universal
  checkpoint (``<tag>_universal/``, converted later by ``ds_to_universal.py``) is named by ``latest_universal``,
  which the converter writes last, and is judged by that pointer's write time. Source:
  ``deepspeed/checkpoint/ds_to_universal.py`` (``main``).
- Megatron-LM: after a barrier, rank 0 writes ``latest_checkpointed_iteration.txt`` beside ``iter_XXXXXXX/``;
  the same write-time rule. Source: NVIDIA/Megatron-LM ``megatron/training/checkpointing.py``.
- NeMo 1 and 2: ``ModelCheckpoint`` touches ``<checkpoint>-unfinished`` beside the checkpoint before saving
  and removes it when every rank is done; AutoResume skips marked ones. Source: NVIDIA/NeMo
  ``nemo/lightning/pytorch/callbacks/model_checkpoint.py`` (2) and ``nemo/utils/callbacks/nemo_model_checkpoint.py``
  (1), both ``UNFINISHED_CHECKPOINT_SUFFIX = "-unfinished"``.
- Hugging Face Trainer: ``_save_checkpoint`` writes ``trainer_state.json`` last into ``checkpoint-<step>/``;
  transformers 4.36-4.37 staged saves in ``tmp-checkpoint-<step>/`` and renamed them when whole, and
  ``get_last_checkpoint`` only ever loads ``checkpoint-<step>``. A folder is Trainer's when it holds
  ``training_args.bin`` (``_save`` writes it with the model, first) or another ``checkpoint-<step>/`` here holds
  ``trainer_state.json``. Source: huggingface/transformers
  ``src/transformers/trainer.py``, ``trainer_utils.py``; PRs #28364, #28848.
- Hugging Face Accelerate: ``save_state`` (``checkpoint_<n>/`` under ``automatic_checkpoint_naming``) ends with
  ``save_accelerator_state``, where every process writes ``random_states_<process_index>.pkl`` after the model,
  optimizer, scheduler and sampler files; process indices run 0..N-1. Then the main process writes the objects
  registered with ``register_for_checkpointing`` as ``custom_checkpoint_<i>.pkl`` (``save_custom_state``):
  where the job's other save here holds K of them, a save with fewer did not finish. Source: huggingface/accelerate
  ``src/accelerate/accelerator.py`` (``save_state``), ``src/accelerate/checkpointing.py``
  (``save_accelerator_state``), ``src/accelerate/utils/constants.py`` (``RNG_STATE_NAME``).
- Orbax (JAX, MaxText): a step is saved into ``<step>.orbax-checkpoint-tmp[-<ts>]/`` and committed by writing
  ``commit_success.txt`` (``CommitFileTemporaryPath``, the default on object stores; current
  ``AtomicRenameTemporaryPath`` writes it too) and, on a file system, renaming the folder to ``<step>/``;
  Orbax never restores a temporary folder. Source: google/orbax ``checkpoint/orbax/checkpoint/_src/path/
  atomicity.py`` (``finalize``), ``atomicity_defaults.py``, ``temporary_paths.py`` (``is_path_finalized``),
  ``step.py`` (``TMP_DIR_STEP_PATTERN``), ``_src/metadata/checkpoint.py`` (``_CHECKPOINT_METADATA``).
- MosaicML Composer: monolithic saves ``ep<e>-ba<b>-rank0.pt`` (rank 0, ``torch.save``), then repoints the
  ``latest-rank0.pt`` symlink after ``dist.barrier``; sharded saves are DCP under ``ep<e>-ba<b>/``. Source:
  mosaicml/composer ``composer/utils/checkpoint.py`` (``_save_checkpoint``, ``get_save_filename``),
  ``composer/callbacks/checkpoint_saver.py``.
- One object on S3 (a ``torch.save`` file, Composer's monolithic save uploaded): a PUT, and a multipart upload's
  completion, is all-or-nothing, so a listed object is whole. Not on a file system, where ``torch.save``
  writes in place. Source: docs.aws.amazon.com/AmazonS3/latest/userguide/Welcome.html (consistency model),
  API_CompleteMultipartUpload.
- Lightning: ``ModelCheckpoint`` saves each ``.ckpt`` through ``_atomic_save`` (one fsspec transaction), then
  ``last.ckpt``. Source: Lightning-AI/pytorch-lightning ``src/lightning/pytorch/callbacks/model_checkpoint.py``
  and ``src/lightning/fabric/utilities/cloud_io.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from fmdoctor.checkpoints.model import MARKER, UNPROVEN, Checkpoint, StoredObject, Verdict, step_of

DCP_METADATA = ".metadata"
DCP_SHARD = re.compile(r"^__(\d+)_(\d+)\.distcp$")
DEEPSPEED_POINTER = "latest"
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
MEGATRON_COMMON = "common.pt"
MEGATRON_CONFIG = "metadata.json"
NEMO_UNFINISHED = "-unfinished"
HF_STATE = "trainer_state.json"
HF_ARGS = "training_args.bin"  # Trainer._save writes it with the model, first in every Trainer save
HF_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
HF_STAGING = re.compile(r"^tmp-checkpoint-")
SAFETENSORS_SHARD = re.compile(r"^(.*)-(\d+)-of-(\d+)\.safetensors$")
# DCP's HuggingFaceStorageWriter with save_distributed: one piece per rank, 'shard-<rank>-model-<i>-of-<K>'; its
# finish writes no index for them (consolidation, when on, writes the model-<i>-of-<K> files and the index).
DCP_HF_RANK_PIECE = re.compile(r"^shard-\d+-.*-\d+-of-\d+\.safetensors$")
ACCELERATE_RNG = re.compile(r"^random_states_(\d+)\.pkl$")
ACCELERATE_CUSTOM = re.compile(r"^custom_checkpoint_(\d+)\.pkl$")  # register_for_checkpointing, after the above
ORBAX_TMP = re.compile(r"\.orbax-checkpoint-tmp(-\d+)?$")
ORBAX_COMMIT = "commit_success.txt"
ORBAX_METADATA = "_CHECKPOINT_METADATA"
ORBAX_FILES = re.compile(r"(^|/)(_CHECKPOINT_METADATA|_METADATA|manifest\.ocdbt|ocdbt\.process_\d+/)")
COMPOSER_SAVE = re.compile(r"^ep\d+-ba\d+(-rank\d+)?")
COMPOSER_LATEST = re.compile(r"^latest-rank(\d+)")
LIGHTNING_LAST = re.compile(r"^last(-v\d+)?\.ckpt$")
DEEPSPEED_SHARD = re.compile(r"(^|/)(bf16_)?(zero_pp_rank_\d+_)?mp_rank_\d+(_\d+)?_(model|optim)_states\.pt$")
# DeepSpeed's ds_to_universal.py writes '<tag>_universal/' beside the tags, then 'latest_universal' naming it.
DEEPSPEED_UNIVERSAL_POINTER = "latest_universal"
DEEPSPEED_UNIVERSAL = re.compile(r"_universal$")
POINTERS = {DEEPSPEED_POINTER: "DeepSpeed's 'latest' file", MEGATRON_TRACKER: "Megatron's tracker file",
            DEEPSPEED_UNIVERSAL_POINTER: "DeepSpeed's 'latest_universal' file (ds_to_universal.py)"}


@dataclass(frozen=True)
class LocationMarkers:
    """What a location's top level says beside its checkpoints."""

    pointers: dict[str, StoredObject] = field(default_factory=dict)  # 'latest' / the tracker file
    unfinished: dict[str, StoredObject] = field(default_factory=dict)  # checkpoint name -> its NeMo marker
    links: dict[str, str] = field(default_factory=dict)  # symlink name -> target (local paths)
    folders: frozenset[str] = frozenset()  # every folder name at the top level (Orbax's temporary folders)

    def is_marker(self, name: str) -> bool:
        return name in self.pointers or name.endswith(NEMO_UNFINISHED)


@dataclass(frozen=True)
class LocationContext:
    """What the checkpoints listed at one location say about the writer, beyond one checkpoint."""

    object_store: bool = True  # S3 (an object is all-or-nothing; a 'rename' copies object by object)
    hf_trainer: bool = False  # a checkpoint-<step>/ here holds trainer_state.json: Trainer writes them
    orbax_commits: bool = False  # an Orbax step here holds commit_success.txt: this Orbax writes one per commit
    accelerate: bool = False  # a checkpoint here holds random_states_<n>.pkl: Accelerate's save_state writes them
    accelerate_custom: int = 0  # custom_checkpoint_<i>.pkl files (0..K-1) the job's Accelerate saves here hold


def location_markers(files: list[StoredObject], folders: list[str] | tuple[str, ...] = ()) -> LocationMarkers:
    markers = LocationMarkers(folders=frozenset(folders))
    for obj in files:
        if obj.link_target is not None:
            markers.links[obj.key] = obj.link_target.rstrip("/").rsplit("/", 1)[-1]
        elif obj.key in POINTERS:
            markers.pointers[obj.key] = obj
        elif obj.key.endswith(NEMO_UNFINISHED):
            markers.unfinished[obj.key.removesuffix(NEMO_UNFINISHED)] = obj
    return markers


def location_context(listed: list[Checkpoint], object_store: bool) -> LocationContext:
    return LocationContext(
        object_store=object_store,
        hf_trainer=any(HF_CHECKPOINT.match(c.name) and any(f.key == HF_STATE for f in c.files) for c in listed),
        orbax_commits=any(_is_orbax(c) and any(f.key == ORBAX_COMMIT for f in c.files) for c in listed),
        accelerate=any(ACCELERATE_RNG.match(f.key) for c in listed for f in c.files),
        accelerate_custom=max((_custom_objects(c) for c in listed if any(ACCELERATE_RNG.match(f.key) for f in c.files)),
                              default=0),
    )


def unfinished_marker(markers: LocationMarkers, name: str) -> StoredObject | None:
    """NeMo's marker for a checkpoint: its path without '.ckpt' (and '-EMA') plus '-unfinished'."""
    return markers.unfinished.get(name.removesuffix(".ckpt").removesuffix("-EMA"))


def is_staging(name: str) -> bool:
    """A folder a framework never loads and renames when whole: HF Trainer's, Orbax's temporary folders."""
    return bool(HF_STAGING.match(name) or ORBAX_TMP.search(name))


Result = tuple[bool, str] | None
Proof = Callable[[Checkpoint, LocationMarkers, LocationContext, bool], Result]


def judge(checkpoint: Checkpoint, markers: LocationMarkers, context: LocationContext | None = None,
          top_level: bool = True) -> Verdict:
    """Every framework proof that applies to ``checkpoint``: incomplete if any fails, complete if one holds,
    else undecided (``complete=None``: fall back to a comparison, which is a hint, or to nothing)."""
    context = context or LocationContext()
    held: list[str] = []
    failed: list[str] = []
    holding: list[str] = []
    failing: list[str] = []
    for framework, proof in PROOFS:
        result = proof(checkpoint, markers, context, top_level)
        if result is None:
            continue
        ok, sentence = result
        (held if ok else failed).append(sentence)
        (holding if ok else failing).append(framework)
    if failed:
        return Verdict(False, MARKER, tuple(held), tuple(failed), framework=", ".join(dict.fromkeys(failing)))
    if held:
        return Verdict(True, MARKER, tuple(held), framework=", ".join(dict.fromkeys(holding)))
    return Verdict(None, UNPROVEN)


def _staging(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    if not HF_STAGING.match(cp.name):
        return None
    return False, (f"{cp.name} is Hugging Face Trainer's staging folder: Trainer renames it to "
                   "checkpoint-<step> only when the save is whole, and never loads it")


def _orbax_tmp(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    if not ORBAX_TMP.search(cp.name):
        return None
    return False, (f"{cp.name} is Orbax's temporary folder: Orbax commits a step by writing {ORBAX_COMMIT} and "
                   "renaming it to the step's name, and never restores a temporary folder")


def _orbax_step(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    if ORBAX_TMP.search(cp.name) or not _is_orbax(cp):
        return None
    renaming = sorted(f for f in markers.folders if ORBAX_TMP.search(f) and f.startswith(cp.name + "."))
    if context.object_store and renaming:
        return False, (f"Orbax's temporary folder {renaming[0]} is still beside {cp.name}: on an object store "
                       "a rename copies object by object and deletes the source last, so the copy is not whole")
    if any(f.key == ORBAX_COMMIT for f in cp.files):
        return True, f"Orbax wrote {ORBAX_COMMIT} into {cp.name} when it committed the step"
    if context.orbax_commits:
        return False, (f"no {ORBAX_COMMIT} in {cp.name}: this Orbax writes it when it commits a step (the other "
                       "step listed here has it), so the save did not finish")
    if not context.object_store:  # an Orbax that commits by rename alone (before commit_success.txt on POSIX)
        return True, (f"Orbax renamed {cp.name}.orbax-checkpoint-tmp to {cp.name} when it committed the step "
                      "(an atomic rename on a file system)")
    return None  # ... and on S3, where a 'rename' copies object by object, nothing in a listing proves it whole


def _is_orbax(cp: Checkpoint) -> bool:
    return any(ORBAX_FILES.search(f.key) for f in cp.files)


def _nemo(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    marker = unfinished_marker(markers, cp.name)
    if marker is not None:
        return False, (f"NeMo's marker {marker.key} (touched {marker.last_modified.isoformat()}) is still there: "
                       "ModelCheckpoint removes it only when every rank has finished the save")
    folders = {f.key.split("/", 1)[0] for f in cp.files if "/" in f.key}
    if {"weights", "context"} <= folders:
        return True, f"NeMo checkpoint {cp.name} has no '-unfinished' marker beside it"
    return None


def _dcp(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
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
    if any(set(range(max(ranks) + 1)) - ranks for ranks in shards.values()):
        # .metadata says the writer finished; a rank without a file proves nothing either way: Megatron Core's
        # FileSystemWriterAsync writes no file for a rank with nothing to save (fully parallel save spreads
        # replicated tensors over fewer ranks than it has), nor DCP with single_file_per_rank=False, and a copy
        # still arriving (SageMaker's sync, an FSx export) lacks one too. Left to the comparison, a hint.
        return None
    ranks = max(len(r) for r in shards.values())
    return True, f"PyTorch DCP .metadata written beside {ranks} rank(s) of shards in {where}"


def _megatron_dist(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    """Megatron Core dist-checkpointing: common.pt first, metadata.json last (its finalize step)."""
    commons = {f.key.rpartition("/")[0] for f in cp.files if f.key.rpartition("/")[2] == MEGATRON_COMMON}
    if not commons:
        return None
    configs = {f.key.rpartition("/")[0] for f in cp.files if f.key.rpartition("/")[2] == MEGATRON_CONFIG}
    lacking = sorted(commons - configs)
    if lacking:
        place = ", ".join(f"{folder}/" if folder else cp.name for folder in lacking)
        return False, (f"{MEGATRON_COMMON} but no {MEGATRON_CONFIG} in {place}: Megatron's dist_checkpointing.save "
                       "writes metadata.json last, once every rank's shards are saved")
    place = ", ".join(f"{folder}/" if folder else cp.name for folder in sorted(commons))
    return True, f"Megatron dist-checkpointing wrote {MEGATRON_CONFIG}, its last file, in {place}"


def _safetensors(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    """Sharded safetensors name their count ('-00002-of-00004'); the index follows the shards."""
    series: dict[tuple[str, str, int], set[int]] = {}
    names = {f.key for f in cp.files}
    for f in cp.files:
        folder, _, name = f.key.rpartition("/")
        if DCP_HF_RANK_PIECE.match(name):
            continue  # a rank's piece of shard i, never indexed: only the consolidated series proves the save
        if (match := SAFETENSORS_SHARD.match(name)) is not None:
            series.setdefault((folder, match.group(1), int(match.group(3))), set()).add(int(match.group(2)))
    if not series:
        return None
    for (folder, stem, total), present in sorted(series.items()):
        missing = sorted(set(range(1, total + 1)) - present)
        where = f"{folder}/" if folder else cp.name
        if missing:
            return False, (f"{len(missing)} of the {total} safetensors shards '{stem}-*-of-{total:05d}' are missing "
                           f"in {where} (shard {missing[0]} first): the names say how many were written")
        index = f"{folder}/{stem}.safetensors.index.json" if folder else f"{stem}.safetensors.index.json"
        if index not in names:
            return False, (f"every one of the {total} '{stem}' safetensors shards is in {where} but not "
                           f"{index.rpartition('/')[2]}, written after them")
    total = sum(t for _, _, t in series)
    return True, f"all {total} safetensors shard(s) their names count, and their index, are in {cp.name}"


def _accelerate(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    processes = {int(m.group(1)) for f in cp.files if (m := ACCELERATE_RNG.match(f.key))}
    if not processes:
        if context.accelerate and cp.files and not _one_file(cp):
            return False, (f"no random_states_<process>.pkl in {cp.name}: Accelerate's save_state writes one per "
                           "process after the model and optimizer (the other save listed here has them), so the "
                           "save did not finish")
        return None
    missing = sorted(set(range(max(processes) + 1)) - processes)
    if missing:
        return False, (f"random_states_{missing[0]}.pkl is missing from {cp.name} ({len(missing)} process(es) of "
                       f"{max(processes) + 1}): Accelerate's save_state has every process write "
                       "random_states_<process_index>.pkl after its other files, so those processes did not finish")
    customs = _custom_objects(cp)
    if customs < context.accelerate_custom:
        return False, (f"custom_checkpoint_{customs}.pkl is missing from {cp.name}: Accelerate's save_state writes "
                       "the objects registered with register_for_checkpointing (custom_checkpoint_<i>.pkl) after "
                       f"every random_states file, and this job registers {context.accelerate_custom} (the other "
                       "save listed here has them), so the save did not finish")
    registered = f", then its {customs} registered object(s) (custom_checkpoint_<i>.pkl)" if customs else ""
    return True, (f"Accelerate's save_state wrote random_states_<process>.pkl, each process's last file, for all "
                  f"{len(processes)} process(es) 0-{max(processes)} in {cp.name}{registered}")


def _custom_objects(cp: Checkpoint) -> int:
    """How many registered objects a save holds: custom_checkpoint_0.pkl .. _{K-1}.pkl, written in order."""
    indices = {int(m.group(1)) for f in cp.files if (m := ACCELERATE_CUSTOM.match(f.key))}
    return next(i for i in range(len(indices) + 1) if i not in indices)


def _nested_deepspeed(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    """DeepSpeed saved inside a framework's checkpoint folder (HF Trainer, Lightning, Accelerate): its 'latest'."""
    shards = [f for f in cp.files if "/" in f.key and DEEPSPEED_SHARD.search(f.key)]
    pointer = next((f for f in cp.files if f.key == DEEPSPEED_POINTER), None)
    if not shards or pointer is None:
        return None
    began = min(f.last_modified for f in shards)
    if pointer.last_modified >= began:
        return True, f"DeepSpeed's 'latest' inside {cp.name} was rewritten after its shards were saved"
    return False, (f"DeepSpeed's 'latest' inside {cp.name} is older than its shards: the save died before "
                   "rank 0 rewrote it")


def _hf_trainer(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    own = any(f.key == HF_ARGS for f in cp.files)  # a Trainer save, even the first one (no other to learn from)
    if not (context.hf_trainer or own) or not HF_CHECKPOINT.match(cp.name):
        return None
    if any(f.key == HF_STATE for f in cp.files):
        return True, f"Hugging Face Trainer wrote {HF_STATE}, its last file, into {cp.name}"
    return False, f"no {HF_STATE} in {cp.name}: Trainer._save_checkpoint writes it last, so the save did not finish"


def _deepspeed_latest(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    if _megatron_iteration(cp, markers):
        return None
    # A universal checkpoint is converted after the save, and named by its own pointer, never by 'latest'.
    pointer = DEEPSPEED_UNIVERSAL_POINTER if DEEPSPEED_UNIVERSAL.search(cp.name) else DEEPSPEED_POINTER
    return _pointer(cp, markers.pointers.get(pointer), POINTERS[pointer], top_level)


def _megatron_tracker(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    if not _megatron_iteration(cp, markers):
        return None
    return _pointer(cp, markers.pointers[MEGATRON_TRACKER], POINTERS[MEGATRON_TRACKER], top_level)


def _megatron_iteration(cp: Checkpoint, markers: LocationMarkers) -> bool:
    return MEGATRON_TRACKER in markers.pointers and cp.name.startswith("iter_")


def _pointer(cp: Checkpoint, pointer: StoredObject | None, label: str, top_level: bool) -> Result:
    """A pointer file beside the checkpoints, rewritten once every rank has saved: compared by write time."""
    if pointer is None or not top_level or not cp.files or _one_file(cp):
        return None  # a single-file checkpoint is no DeepSpeed tag or Megatron iteration folder
    began = cp.first_modified
    if pointer.last_modified >= began:
        return True, (f"{label} was rewritten at {pointer.last_modified.isoformat()}, after the save of "
                      f"{cp.name} began ({began.isoformat()})")
    return False, (f"the save of {cp.name} began at {began.isoformat()}, after {label} was last rewritten "
                   f"({pointer.last_modified.isoformat()}): the framework rewrites it only once every rank has "
                   "saved, and resumes from what it names")


def _composer(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    """Composer repoints latest-rank0 (a symlink, on a file system) only after every rank saved."""
    if not COMPOSER_SAVE.match(cp.name):
        return None
    target = next((t for link, t in markers.links.items() if COMPOSER_LATEST.match(link)), None)
    if target is None:
        return None
    if target == cp.name:
        return True, f"Composer's latest-rank0 points at {cp.name}: it is repointed after every rank saved"
    target_step, step = step_of(target), step_of(cp.name)
    if target_step is not None and step is not None and step > target_step:
        return False, (f"Composer's latest-rank0 still points at {target}: Composer repoints it after every rank "
                       f"saved (dist.barrier), so the save of {cp.name} did not finish")
    return None


def _lightning_file(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    if _one_file(cp) and cp.name.endswith(".ckpt"):
        return True, f"Lightning writes each .ckpt file in one transaction (_atomic_save), so {cp.name} is whole"
    return None


def _one_object(cp: Checkpoint, markers: LocationMarkers, context: LocationContext, top_level: bool) -> Result:
    if not _one_file(cp) or not context.object_store or cp.name.endswith(".ckpt"):
        return None
    return True, (f"{cp.name} is one S3 object: a PUT (or a multipart upload's completion) is all-or-nothing, so "
                  "a listed object is whole")


def _one_file(cp: Checkpoint) -> bool:
    return len(cp.files) == 1 and cp.files[0].key == cp.name


PROOFS: tuple[tuple[str, Proof], ...] = (
    ("Hugging Face Trainer", _staging),
    ("Orbax", _orbax_tmp),
    ("Orbax", _orbax_step),
    ("NeMo", _nemo),
    ("PyTorch DCP", _dcp),
    ("Megatron dist-checkpointing", _megatron_dist),
    ("safetensors shards", _safetensors),
    ("Hugging Face Accelerate", _accelerate),
    ("DeepSpeed", _nested_deepspeed),
    ("Hugging Face Trainer", _hf_trainer),
    ("DeepSpeed", _deepspeed_latest),
    ("Megatron-LM", _megatron_tracker),
    ("MosaicML Composer", _composer),
    ("Lightning", _lightning_file),
    ("one S3 object", _one_object),
)

