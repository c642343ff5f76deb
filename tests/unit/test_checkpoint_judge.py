"""A table of small cases isolating every branch of the checkpoint judge: each framework's proof
(fmdoctor/checkpoints/frameworks.py), the comparison that is only a hint (compare.py), and which checkpoint is
the usable one (scan.py). Layouts from the writers themselves are in test_checkpoint_frameworks.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.checkpoints.compare import compare
from fmdoctor.checkpoints.frameworks import LocationContext, judge, location_markers
from fmdoctor.checkpoints.model import COMPARISON, MARKER, UNPROVEN, Checkpoint, StoredObject, step_of
from fmdoctor.checkpoints.scan import scan_location

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
S3 = LocationContext(object_store=True)
FS = LocationContext(object_store=False)


def cp(name: str, *files: str | tuple[str, int, int], step: int | None = None) -> Checkpoint:
    """A checkpoint from 'key' or (key, size, minute) entries; minute 0 unless given."""
    objects = []
    for f in files:
        key, size, minute = (f, 100, 0) if isinstance(f, str) else f
        objects.append(StoredObject(key, size, T0 + timedelta(minutes=minute)))
    return Checkpoint(name, f"s3://b/{name}/", step if step is not None else step_of(name), tuple(objects))


def top(*entries: str | tuple[str, int] | tuple[str, str]) -> list[StoredObject]:
    """Top-level files beside the checkpoints: 'name', (name, minute) or (link, target)."""
    found = []
    for e in entries:
        if isinstance(e, str):
            found.append(StoredObject(e, 4, T0))
        elif isinstance(e[1], int):
            found.append(StoredObject(e[0], 4, T0 + timedelta(minutes=e[1])))
        else:
            found.append(StoredObject(e[0], 0, T0, link_target=e[1]))
    return found


ORBAX = ("_CHECKPOINT_METADATA", "items/_METADATA", "items/manifest.ocdbt",
         "items/ocdbt.process_0/d/0f1e2d3c4b5a69788796a5b4c3d2e1f0")

# (id, checkpoint, top-level files, top-level folders, context, expected complete, framework, words in the proof)
CASES = [
    ("hf-staging", cp("tmp-checkpoint-5", "model.safetensors"), [], [], S3, False, "Hugging Face Trainer",
     "staging folder"),
    ("orbax-tmp", cp("3000.orbax-checkpoint-tmp", *ORBAX), [], [], FS, False, "Orbax", "temporary folder"),
    ("orbax-tmp-with-timestamp", cp("3000.orbax-checkpoint-tmp-1740819600", *ORBAX), [], [], FS, False, "Orbax",
     "temporary folder"),
    ("orbax-commit-file", cp("3000", *ORBAX, "commit_success.txt"), [], [], S3, True, "Orbax", "commit_success"),
    ("orbax-renaming-on-s3", cp("3000", *ORBAX, "commit_success.txt"), [], ["3000", "3000.orbax-checkpoint-tmp"],
     S3, False, "Orbax", "still beside 3000"),
    ("orbax-tmp-beside-on-a-file-system", cp("3000", *ORBAX, "commit_success.txt"), [],
     ["3000", "3000.orbax-checkpoint-tmp"], FS, True, "Orbax", "commit_success"),
    ("orbax-another-steps-tmp-is-no-rename-of-this-one", cp("300", *ORBAX, "commit_success.txt"), [],
     ["300", "3000.orbax-checkpoint-tmp"], S3, True, "Orbax", "commit_success"),
    ("orbax-no-commit-where-this-orbax-writes-one", cp("3000", *ORBAX), [], [],
     LocationContext(object_store=True, orbax_commits=True), False, "Orbax", "no commit_success.txt"),
    ("orbax-no-commit-renamed-on-a-file-system", cp("3000", *ORBAX), [], [], FS, True, "Orbax", "atomic rename"),
    ("orbax-no-commit-on-s3-unknown", cp("3000", *ORBAX), [], [], S3, None, None, ""),
    ("nemo-unfinished-marker", cp("run-step=10-last", "weights/common.pt", "weights/metadata.json", "context/io.json"),
     ["run-step=10-last-unfinished"], [], S3, False, "NeMo", "-unfinished"),
    ("nemo1-ckpt-file-marked", cp("megatron_gpt--step=10-last.ckpt", "megatron_gpt--step=10-last.ckpt"),
     ["megatron_gpt--step=10-last-unfinished"], [], FS, False, "NeMo", "-unfinished"),
    ("nemo-no-marker", cp("run-step=10-last", "weights/x.pt", "context/io.json"), [], [], S3, True, "NeMo",
     "no '-unfinished' marker"),
    ("dcp-no-metadata", cp("step-1", "__0_0.distcp", "__1_0.distcp"), [], [], S3, False, "PyTorch DCP",
     "StorageWriter.finish"),
    # A rank without a file beside .metadata proves nothing (Megatron's writer skips ranks with nothing to save).
    ("dcp-hole", cp("step-1", "__0_0.distcp", "__2_0.distcp", ".metadata"), [], [], S3, None, None, ""),
    ("dcp-whole", cp("step-1", "__0_0.distcp", "__1_0.distcp", ".metadata"), [], [], S3, True, "PyTorch DCP",
     "2 rank(s)"),
    ("dcp-nested-folder-lacking", cp("step-1", "model/__0_0.distcp", "model/.metadata", "optim/__0_0.distcp"), [],
     [], S3, False, "PyTorch DCP", "optim/"),
    ("megatron-dist-no-metadata-json", cp("iter_0000010", "common.pt"), [], [], S3, False,
     "Megatron dist-checkpointing", "no metadata.json"),
    ("megatron-dist-whole", cp("iter_0000010", "common.pt", "metadata.json"), [], [], S3, True,
     "Megatron dist-checkpointing", "wrote metadata.json"),
    ("safetensors-missing-shard", cp("step-2", "model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors",
                                     "model.safetensors.index.json"), [], [], S3, False, "safetensors shards",
     "1 of the 3"),
    ("safetensors-last-shard-missing", cp("step-2", "model-00001-of-00002.safetensors", "model.safetensors.index.json"),
     [], [], S3, False, "safetensors shards", "1 of the 2"),
    ("safetensors-no-index", cp("step-2", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"),
     [], [], S3, False, "safetensors shards", "model.safetensors.index.json"),
    ("safetensors-whole", cp("step-2", "w/model-00001-of-00002.safetensors", "w/model-00002-of-00002.safetensors",
                             "w/model.safetensors.index.json"), [], [], S3, True, "safetensors shards", "all 2"),
    ("accelerate-hole", cp("checkpoint_3", "model.safetensors", "random_states_0.pkl", "random_states_2.pkl"), [], [],
     S3, False, "Hugging Face Accelerate", "random_states_1.pkl is missing"),
    ("accelerate-main-process-missing", cp("checkpoint_1", "model.safetensors", "random_states_1.pkl"), [], [], S3,
     False, "Hugging Face Accelerate", "random_states_0.pkl is missing"),
    ("accelerate-whole", cp("checkpoint_1", "model.safetensors", "random_states_0.pkl", "random_states_1.pkl"), [],
     [], S3, True, "Hugging Face Accelerate", "2 process(es) 0-1"),
    ("accelerate-none-where-accelerate-writes-them", cp("checkpoint_2", "model.safetensors"), [], [],
     LocationContext(accelerate=True), False, "Hugging Face Accelerate", "no random_states_<process>.pkl"),
    ("accelerate-one-file-is-not-its-folder", cp("ckpt-2.pt", "ckpt-2.pt"), [], [],
     LocationContext(object_store=False, accelerate=True), None, None, ""),
    ("deepspeed-nested-latest-older", cp("checkpoint-4", ("latest", 1, 0), ("global_step4/mp_rank_00_model_states.pt",
                                                                            100, 5)),
     [], [], S3, False, "DeepSpeed", "older than its shards"),
    ("deepspeed-nested-latest-newer", cp("checkpoint-4", ("latest", 1, 9), ("global_step4/mp_rank_00_model_states.pt",
                                                                            100, 5)),
     [], [], S3, True, "DeepSpeed", "rewritten after"),
    ("deepspeed-nested-latest-same-second", cp("checkpoint-4", ("latest", 1, 5),
                                               ("global_step4/mp_rank_00_model_states.pt", 100, 5)),
     [], [], S3, True, "DeepSpeed", "rewritten after"),
    ("hf-trainer-state", cp("checkpoint-4", "model.safetensors", "trainer_state.json"), [], [],
     LocationContext(hf_trainer=True), True, "Hugging Face Trainer", "trainer_state.json"),
    ("hf-trainer-no-state", cp("checkpoint-4", "model.safetensors"), [], [], LocationContext(hf_trainer=True), False,
     "Hugging Face Trainer", "no trainer_state.json"),
    ("hf-name-without-trainer-here", cp("checkpoint-4", "model.safetensors"), [], [], S3, None, None, ""),
    ("deepspeed-latest-after", cp("global_step4", ("mp_rank_00_model_states.pt", 100, 0)), [("latest", 3)], [], S3,
     True, "DeepSpeed", "rewritten at"),
    ("deepspeed-latest-before", cp("global_step4", ("mp_rank_00_model_states.pt", 100, 5)), [("latest", 3)], [], S3,
     False, "DeepSpeed", "after DeepSpeed's 'latest' file was last rewritten"),
    ("deepspeed-latest-same-second", cp("global_step4", ("mp_rank_00_model_states.pt", 100, 3)), [("latest", 3)], [],
     S3, True, "DeepSpeed", "rewritten at"),
    ("deepspeed-tag-beside-a-megatron-tracker", cp("global_step4", ("mp_rank_00_model_states.pt", 100, 0)),
     [("latest_checkpointed_iteration.txt", -9), ("latest", 3)], [], S3, True, "DeepSpeed", "rewritten at"),
    ("megatron-tracker-before", cp("iter_0000004", ("mp_rank_00/model_optim_rng.pt", 100, 5)),
     [("latest_checkpointed_iteration.txt", 3), ("latest", 9)], [], S3, False, "Megatron-LM", "tracker"),
    ("pointer-ignores-single-files", cp("ckpt-4.pt", "ckpt-4.pt"), [("latest", -9)], [], FS, None, None, ""),
    ("composer-latest-names-it", cp("ep0-ba20-rank0.pt", "ep0-ba20-rank0.pt"), [("latest-rank0.pt",
                                                                                "ep0-ba20-rank0.pt")],
     [], FS, True, "MosaicML Composer", "points at"),
    ("composer-latest-names-an-older-save", cp("ep0-ba30-rank0.pt", "ep0-ba30-rank0.pt"),
     [("latest-rank0.pt", "ep0-ba20-rank0.pt")], [], FS, False, "MosaicML Composer", "still points at"),
    ("composer-latest-names-a-newer-save", cp("ep0-ba10-rank0.pt", "ep0-ba10-rank0.pt"),
     [("latest-rank0.pt", "ep0-ba20-rank0.pt")], [], FS, None, None, ""),
    ("composer-latest-names-another-save-of-the-same-batch", cp("ep0-ba20-rank0.pt", "ep0-ba20-rank0.pt"),
     [("latest-rank0.pt", "ep1-ba20-rank0.pt")], [], FS, None, None, ""),
    ("composer-without-latest-on-a-file-system", cp("ep0-ba10-rank0.pt", "ep0-ba10-rank0.pt"), [], [], FS, None,
     None, ""),
    ("lightning-ckpt", cp("epoch=0-step=5.ckpt", "epoch=0-step=5.ckpt"), [], [], FS, True, "Lightning",
     "_atomic_save"),
    ("one-s3-object", cp("ckpt-5.pt", "ckpt-5.pt"), [], [], S3, True, "one S3 object", "all-or-nothing"),
    ("one-file-on-a-file-system", cp("ckpt-5.pt", "ckpt-5.pt"), [], [], FS, None, None, ""),
    ("one-file-in-a-folder-is-no-object-proof", cp("step-5", "model.pt"), [], [], S3, None, None, ""),
    ("unknown-layout", cp("step-5", "a.bin", "b.bin"), [], [], S3, None, None, ""),
    ("a-failed-proof-beats-a-held-one", cp("step-1", "__0_0.distcp", "model-00001-of-00001.safetensors",
                                           "model.safetensors.index.json"), [], [], S3, False, "PyTorch DCP",
     "StorageWriter.finish"),
]


@pytest.mark.parametrize("checkpoint, files, folders, context, complete, framework, words",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_branch_of_each_framework_proof(checkpoint, files, folders, context, complete, framework, words):
    verdict = judge(checkpoint, location_markers(top(*files), folders), context)
    assert verdict.complete is complete
    assert verdict.framework == framework
    assert verdict.method == (UNPROVEN if complete is None else MARKER)
    assert verdict.proven is (complete is not None)
    assert words in " ".join(verdict.proofs + verdict.reasons)


def test_a_proof_read_below_the_top_level_ignores_pointers():
    verdict = judge(cp("global_step4", ("mp_rank_00_model_states.pt", 100, 5)), location_markers(top(("latest", 3))),
                    S3, top_level=False)
    assert verdict.complete is None


# --- The comparison: a hint -----------------------------------------------------------------------------------

def folder(name: str, files: dict[str, int], step: int | None = None) -> Checkpoint:
    return Checkpoint(name, f"s3://b/{name}/", step if step is not None else step_of(name),
                      tuple(StoredObject(k, s, T0) for k, s in files.items()))


RNG16 = {f"random_states_{p}.pkl": 10 for p in range(16)}


@pytest.mark.parametrize(
    "newest, previous, complete, words",
    [
        # A step number inside file names: Accelerate's random_states_3.pkl in checkpoint_3 is a process.
        (folder("checkpoint_3", RNG16 | {"model.bin": 500}), folder("checkpoint_2", RNG16 | {"model.bin": 500}),
         True, "every kind of file"),
        # ... and any other number equal to the step is read both ways: shard_3.bin in step 3 is not '{step}'.
        (folder("step-3", {f"shard_{i}.bin": 10 for i in range(8)}),
         folder("step-2", {f"shard_{i}.bin": 10 for i in range(8)}), True, "every kind of file"),
        (folder("step-120", {"model_120.pt": 50, "optim_120.pt": 50}),
         folder("step-100", {"model_100.pt": 50, "optim_100.pt": 50}), True, "every kind of file"),
        (folder("step-120", {"model_120.pt": 100}), folder("step-100", {"model_100.pt": 50, "optim_100.pt": 50}),
         False, "1 kind(s) of file step-100 had are missing"),
        # Per-process names: fewer processes is a smaller world; a hole is a missing shard.
        (folder("s2", {f"x_process_{p}.bin": 20 for p in range(4)}),
         folder("s1", {f"x_process_{p}.bin": 10 for p in range(8)}), True, "every kind of file"),
        (folder("s2", {f"rng_state_{p}.pth": 10 for p in (0, 1, 3)} | {"m": 100}),
         folder("s1", {f"rng_state_{p}.pth": 10 for p in range(4)} | {"m": 100}), False, "missing from the rank grid"),
        (folder("s2", {f"zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt": 8 for d in range(2) for m in range(2)}),
         folder("s1", {f"zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt": 10 for d in range(4) for m in range(2)}),
         False, "40% of s1's size"),
        # Content-addressed names differ in every save: compared by directory bytes, not names.
        (folder("2", {"d/" + "ab" * 16: 60, "d/" + "cd" * 16: 50, "manifest": 3}),
         folder("1", {"d/" + "12" * 16: 100, "manifest": 3}), True, "every kind of file"),
        (folder("2", {"d/" + "ab" * 16: 20, "big.bin": 1000}), folder("1", {"d/" + "12" * 16: 100, "big.bin": 1000}),
         False, "content-addressed files in d hold 20%"),
        (folder("2", {"blobs/0b6f2c1e-8f7d-4d2a-9a51-1c2b3d4e5f60": 10}),
         folder("1", {"blobs/5f1e7c3a-2b4d-4e6f-8a9b-0c1d2e3f4a5b": 10}), True, "every kind of file"),
        # Size: under the ratio is a hint; bigger is fine.
        (folder("s2", {"w.pt": 400}), folder("s1", {"w.pt": 1000}), False, "40% of s1's size"),
        (folder("s2", {"w.pt": 5000}), folder("s1", {"w.pt": 1000}), True, "every kind of file"),
    ],
    ids=["accelerate-step-in-process-names", "numbered-files-equal-to-the-step", "step-in-names",
         "a-kind-missing", "fewer-processes", "rng-state-hole", "zero-grid-halved-and-half-the-bytes",
         "hex-names", "hex-directory-thin", "uuid-names", "smaller", "bigger"],
)
def test_each_branch_of_the_comparison(newest, previous, complete, words):
    verdict = compare(newest, previous, 0.5)
    assert verdict.complete is complete and verdict.method == COMPARISON and not verdict.proven
    assert words in " ".join(verdict.proofs + verdict.reasons)
    assert "not a framework's proof" in verdict.proofs[0]


def test_a_missing_shard_is_named_as_the_writer_would_name_it():
    verdict = compare(folder("step-7", {"model_7_rank0.pt": 1, "model_7_rank2.pt": 1}),
                      folder("step-6", {f"model_6_rank{r}.pt": 1 for r in range(3)}), 0.5)
    assert verdict.missing_files == ("model_7_rank1.pt",)


# --- Which checkpoint is usable --------------------------------------------------------------------------------

class Listing:
    root = "s3://b/run/"

    def __init__(self, objects: dict[str, tuple[int, int]]):
        self.objects = [StoredObject(k, size, T0 + timedelta(minutes=m)) for k, (size, m) in objects.items()]

    def level(self):
        return sorted({o.key.split("/")[0] for o in self.objects if "/" in o.key}), [
            o for o in self.objects if "/" not in o.key]

    def tree(self, name):
        return [StoredObject(o.key[len(name) + 1:], o.size, o.last_modified) for o in self.objects
                if o.key.startswith(name + "/")]

    def everything(self):
        return list(self.objects)


UNKNOWN = {"step-1/a.bin": (100, 0), "step-1/b.bin": (100, 0), "step-2/a.bin": (100, 30), "step-2/b.bin": (100, 30)}


@pytest.mark.parametrize(
    "objects, settled_minute, usable",
    [
        (UNKNOWN, None, "step-2"),  # nothing known about the write grace: the unproven newest is taken
        (UNKNOWN, 40, "step-2"),  # written before the grace began: settled
        (UNKNOWN, 20, "step-1"),  # unproven and written within the grace: may still be under way, never usable
        ({"step-1/a.bin": (100, 0), "step-2/a.bin": (10, 30)}, None, "step-1"),  # only looks incomplete: skipped
        ({"step-1/__0_0.distcp": (9, 0), "step-1/.metadata": (1, 0), "step-2/__0_0.distcp": (9, 30),
          "step-2/.metadata": (1, 30)}, 20, "step-2"),  # proven whole by its marker: usable at once
        ({"step-1/__0_0.distcp": (9, 0), "step-1/.metadata": (1, 0), "step-2/__0_0.distcp": (9, 30)}, None,
         "step-1"),  # proven incomplete
    ],
    ids=["unproven", "unproven-settled", "unproven-within-grace", "suspected", "proven-recent", "proven-incomplete"],
)
def test_the_usable_checkpoint(objects, settled_minute, usable):
    settled = T0 + timedelta(minutes=settled_minute) if settled_minute is not None else None
    result = scan_location(Listing(objects), "s3://b/run/", settled=settled)
    assert result.usable.name == usable


def test_the_suspect_is_the_newest_only_a_comparison_calls_incomplete():
    suspected = scan_location(Listing({"step-1/a.bin": (100, 0), "step-2/a.bin": (10, 30)}), "loc")
    assert suspected.suspect.name == "step-2" and "not proven whole" in suspected.usable_because()
    proven = scan_location(Listing({"step-1/__0_0.distcp": (9, 0), "step-1/.metadata": (1, 0),
                                    "step-2/__0_0.distcp": (9, 30)}), "loc")
    assert proven.suspect is None and proven.in_progress.name == "step-2"
    assert proven.usable_because() == "proven whole by PyTorch DCP's own marker"


def test_a_gap_in_the_rank_grid_the_predecessor_shares_is_the_writers_layout():
    # Megatron Core's FileSystemWriterAsync skips ranks with nothing to save: the same gap in every save.
    shards = {f"__{r}_0.distcp": 100 for r in (0, 1, 3)} | {".metadata": 10}
    same = compare(folder("step-2", shards), folder("step-1", shards), 0.5)
    assert same.complete and not same.missing_files
    whole = {f"__{r}_0.distcp": 100 for r in range(4)} | {".metadata": 10}
    new_gap = compare(folder("step-2", shards), folder("step-1", whole), 0.5)
    assert new_gap.incomplete and new_gap.missing_files == ("__2_0.distcp",)
