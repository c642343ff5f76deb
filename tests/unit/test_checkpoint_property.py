"""Property: a complete save of any supported framework, at any step, on any number of ranks or processes,
with whatever random file names the framework uses, and resumed on a different world size, is never reported
by checkpoint-incomplete (no finding, no 'not verified'), and is the usable checkpoint.

Each generator writes a layout the way that framework's writer does (the rules and their sources are in
fmdoctor/checkpoints/frameworks.py and tests/fixtures/checkpoints/README.md). The check runs for real
(Doctor.check_local, the facts loader, the scanner); only the listing is served from memory, as S3 or as a
file system would list it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmdoctor.checkpoints import facts as checkpoint_facts
from fmdoctor.checkpoints.model import StoredObject
from fmdoctor.checkpoints.scan import scan_location
from fmdoctor.config import Settings
from fmdoctor.engine.api import Doctor
from fmdoctor.engine.host import LocalHost

from .checkpoint_layouts import ListingLister

NOW = datetime.now(UTC).replace(microsecond=0)
HEX = st.text("0123456789abcdef", min_size=32, max_size=32)
Files = list[tuple[str, int]]  # (key relative to the location, size), in write order


@st.composite
def dcp(draw, folder: str) -> Files:
    """torch.distributed.checkpoint (torchtitan step-N, Composer sharded): shards, then .metadata."""
    ranks = draw(st.integers(1, 64))
    return [(f"{folder}/__{r}_0.distcp", draw(st.integers(1, 10**6))) for r in range(ranks)] + [
        (f"{folder}/.metadata", 2048)]


def torchtitan(step: int):
    return dcp(f"step-{step}")


def composer_sharded(step: int):
    return dcp(f"ep{step // 1000}-ba{step}")


@st.composite
def deepspeed(draw, step: int) -> Files:
    dp, bf16 = draw(st.integers(1, 32)), draw(st.booleans())
    files = []
    for r in range(dp):
        files += [(f"global_step{step}/zero_pp_rank_{r}_mp_rank_00_model_states.pt", 512),
                  (f"global_step{step}/{'bf16_' if bf16 else ''}zero_pp_rank_{r}_mp_rank_00_optim_states.pt", 8192)]
    return [*files, ("latest", 14)]


@st.composite
def megatron(draw, step: int) -> Files:
    tp, dist = draw(st.integers(1, 8)), draw(st.booleans())
    folder = f"iter_{step:07d}"
    if dist:  # Megatron Core dist-checkpointing (torch_dist)
        files = [(f"{folder}/common.pt", 4096)] + [(f"{folder}/__{r}_0.distcp", 16384) for r in range(tp)]
        files += [(f"{folder}/.metadata", 3072), (f"{folder}/metadata.json", 64)]
    else:
        files = [(f"{folder}/mp_rank_{r:02d}/model_optim_rng.pt", 16384) for r in range(tp)]
    return [*files, ("latest_checkpointed_iteration.txt", 4)]


@st.composite
def nemo2(draw, step: int) -> Files:
    ranks = draw(st.integers(1, 16))
    loss = draw(st.floats(0.5, 9.5)).__round__(2)
    name = f"megatron_gpt--val_loss={loss:.2f}-step={step}-consumed_samples={step * 128}.0-last"
    files = [(f"{name}/weights/__{r}_0.distcp", 4096) for r in range(ranks)]
    return files + [(f"{name}/weights/.metadata", 1024), (f"{name}/weights/common.pt", 512),
                    (f"{name}/weights/metadata.json", 128), (f"{name}/context/io.json", 2048)]


@st.composite
def hf_trainer(draw, step: int) -> Files:
    processes, shards = draw(st.integers(1, 64)), draw(st.integers(1, 6))
    folder = f"checkpoint-{step}"
    files = [(f"{folder}/config.json", 4096), (f"{folder}/training_args.bin", 256)]  # _save, with the model
    if shards == 1:
        files.append((f"{folder}/model.safetensors", 8192))
    else:
        files += [(f"{folder}/model-{i:05d}-of-{shards:05d}.safetensors", 8192) for i in range(1, shards + 1)]
        files.append((f"{folder}/model.safetensors.index.json", 900))
    files += [(f"{folder}/optimizer.pt", 16384), (f"{folder}/scheduler.pt", 1024)]
    files += [(f"{folder}/rng_state_{p}.pth", 256) for p in range(processes)] if processes > 1 else [
        (f"{folder}/rng_state.pth", 256)]
    return files + [(f"{folder}/trainer_state.json", 512)]


@st.composite
def accelerate(draw, step: int, customs: int = 0) -> Files:
    """save_state with automatic_checkpoint_naming: checkpoint_<iteration>; the iteration is any number. The job
    registers ``customs`` objects (register_for_checkpointing): a property of the job, the same in every save."""
    processes, folder = draw(st.integers(1, 64)), f"checkpoint_{step}"
    # The other processes reach their random states at once; the main process writes the model, optimizer and
    # scheduler first, then its own random_states_0.pkl, then registered custom objects.
    files = [(f"{folder}/random_states_{p}.pkl", 15360) for p in range(1, processes)]
    files += [(f"{folder}/model.safetensors", 40960), (f"{folder}/optimizer.bin", 81920),
              (f"{folder}/scheduler.bin", 1024), (f"{folder}/random_states_0.pkl", 15360)]
    return files + [(f"{folder}/custom_checkpoint_{i}.pkl", 2048) for i in range(customs)]


@st.composite
def orbax(draw, step: int) -> Files:
    """MaxText / CheckpointManager: OCDBT data files under random 128-bit hex names, per process."""
    processes, item = draw(st.integers(1, 16)), draw(st.sampled_from(["items", "default", "state"]))
    files = [(f"{step}/_CHECKPOINT_METADATA", 118)]
    for p in range(processes):
        files += [(f"{step}/{item}/ocdbt.process_{p}/d/{name}", draw(st.integers(1000, 20000)))
                  for name in draw(st.lists(HEX, min_size=1, max_size=4, unique=True))]
        files += [(f"{step}/{item}/ocdbt.process_{p}/manifest.ocdbt", 310),
                  (f"{step}/{item}/array_metadatas/process_{p}", 2200)]
    return files + [(f"{step}/{item}/_sharding", 4100), (f"{step}/{item}/manifest.ocdbt", 388),
                    (f"{step}/{item}/_METADATA", 9300), (f"{step}/commit_success.txt", 61)]


@st.composite
def lightning(draw, step: int) -> Files:
    return [(f"epoch={step // 1000}-step={step}.ckpt", draw(st.integers(1000, 10**6)))]


@st.composite
def one_s3_object(draw, step: int) -> Files:
    """A torch.save file uploaded (Composer's monolithic ep<e>-ba<b>-rank0.pt, or any ckpt-<step>.pt)."""
    name = draw(st.sampled_from([f"ep{step // 1000}-ba{step}-rank0.pt", f"ckpt-{step}.pt", f"step_{step}.pth"]))
    return [(name, draw(st.integers(1, 10**6)))]


# (framework, layout of one save at a step, served from S3 only, the file whose write proves the save whole:
# a save that died before it is in progress or dead; None where a save is one atomic file)
FRAMEWORKS = [
    ("torchtitan / PyTorch DCP", torchtitan, False, lambda key: key.endswith("/.metadata")),
    ("Composer sharded", composer_sharded, False, lambda key: key.endswith("/.metadata")),
    ("DeepSpeed", deepspeed, False, lambda key: key == "latest"),
    ("Megatron-LM", megatron, False, lambda key: key.endswith(("metadata.json", "latest_checkpointed_iteration.txt"))),
    ("NeMo 2", nemo2, False, lambda key: key.endswith("/context/io.json")),  # and its '-unfinished' marker
    ("Hugging Face Trainer", hf_trainer, False, lambda key: key.endswith("/trainer_state.json")),
    ("Accelerate", accelerate, False, lambda key: key.endswith("/random_states_0.pkl")),
    ("Orbax", orbax, False, lambda key: key.endswith("/commit_success.txt")),
    ("Lightning", lightning, False, None),
    ("one S3 object", one_s3_object, True, None),
]


def _written(files: Files, objects: dict[str, StoredObject], when: datetime) -> datetime:
    for key, size in files:
        when += timedelta(seconds=1)
        objects.pop(key, None)
        objects[key] = StoredObject(key, size, when)  # a rewrite (DeepSpeed's latest) keeps its last write
    return when + timedelta(minutes=30)


@st.composite
def complete_location(draw, frameworks=FRAMEWORKS):
    """Two consecutive complete saves of one framework, each on its own world size, the newest settled."""
    framework = draw(st.sampled_from(frameworks))
    name, save, s3_only, proves = framework
    if save is accelerate:  # what the job registers is drawn once for all its saves
        customs = draw(st.integers(0, 2))
        framework = (name, lambda step: accelerate(step, customs), s3_only, proves)
        save = framework[1]
    first = draw(st.integers(0, 10**7))
    second = first + draw(st.integers(1, 10**5))
    on_s3 = s3_only or draw(st.booleans())
    objects: dict[str, StoredObject] = {}
    when = NOW - timedelta(hours=3)
    for step in (first, second):
        when = _written(draw(save(step)), objects, when)
    return objects, on_s3, framework, second, when


@st.composite
def location_with_a_save_that_died(draw):
    """... then a third save that stopped before the write that proves it whole (any number of files into it)."""
    objects, on_s3, (name, save, _, proves), step, when = draw(
        complete_location([f for f in FRAMEWORKS if f[3] is not None]))
    files = draw(save(step + draw(st.integers(1, 10**5))))
    cut = next(i for i, (key, _) in enumerate(files) if proves(key))  # never the first write of a save
    files = files[:draw(st.integers(1, cut))]
    if name == "NeMo 2":  # ModelCheckpoint touches '<checkpoint>-unfinished' before the save begins
        files.insert(0, (files[0][0].split("/", 1)[0] + "-unfinished", 0))
    _written(files, objects, when - timedelta(minutes=25))
    return list(objects.values()), on_s3


def _doctor_reports(objects: list[StoredObject], root: str):
    settings = Settings.model_validate({"checkpoints": {"locations": ["/ckpt/run"], "max_age": "1d"}})
    with mock.patch.object(checkpoint_facts, "LocalLister", lambda host, path: ListingLister(objects, root=root)):
        return Doctor(settings=settings).check_local(only=["checkpoint-incomplete"], host=LocalHost())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(complete_location())
def test_a_complete_save_of_any_supported_framework_is_whole_and_usable(location):
    objects, on_s3 = list(location[0].values()), location[1]
    root = "s3://b/run/" if on_s3 else "/ckpt/run/"
    result = scan_location(ListingLister(objects, root=root), root)
    verdict = result.verdict(result.newest)
    assert verdict.complete and verdict.proven, verdict
    assert result.usable is result.newest


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(complete_location())
def test_checkpoint_incomplete_reports_nothing_on_any_complete_layout(location):
    objects, on_s3 = list(location[0].values()), location[1]
    report = _doctor_reports(objects, "s3://b/run/" if on_s3 else "/ckpt/run/")
    assert report.findings == [] and report.errors == [], (report.findings, report.errors)
    assert report.stats.checks_run == ["checkpoint-incomplete"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(location_with_a_save_that_died())
def test_a_save_that_died_before_its_proof_is_never_the_usable_checkpoint(location):
    objects, on_s3 = location
    root = "s3://b/run/" if on_s3 else "/ckpt/run/"
    result = scan_location(ListingLister(objects, root=root), root)
    assert result.newest is not result.usable and result.usable is result.previous
    assert result.verdict(result.newest).incomplete and result.verdict(result.newest).proven
