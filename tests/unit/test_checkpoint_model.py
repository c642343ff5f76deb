"""Pure checkpoint logic: step numbers in real frameworks' names, newest selection, and the comparison used
where a framework leaves no marker (the markers themselves: test_checkpoint_frameworks.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fmdoctor.checkpoints.compare import compare
from fmdoctor.checkpoints.model import BY_STEP, BY_TIME, Checkpoint, StoredObject, step_of
from fmdoctor.checkpoints.scan import scan_location

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "name, step",
    [
        ("step-000120", 120),  # torch.distributed.checkpoint / torchtitan
        ("global_step1200", 1200),  # DeepSpeed
        ("checkpoint-5000", 5000),  # Hugging Face Trainer
        ("iter_0001200", 1200),  # Megatron-LM
        ("epoch=3-step=1200.ckpt", 1200),  # Lightning: the step, not the epoch
        ("megatron_gpt--val_loss=2.31-step=1000-consumed_samples=128000.0", 1000),  # NeMo 2, not the samples
        ("ckpt-5000.pt", 5000),
        ("checkpoint_3", 3),  # Accelerate's automatic_checkpoint_naming (the save iteration)
        ("ep1-ba4200-rank0.pt", 4200),  # Composer: the batch, not the epoch or the rank
        ("ep0-ba100", 100),  # Composer's sharded folder
        ("3000.orbax-checkpoint-tmp-1740819600", 3000),  # Orbax's temporary folder, not its timestamp
        ("checkpoint_1000.orbax-checkpoint-tmp", 1000),
        ("2000", 2000),  # Orbax's committed step
        ("000120", 120),
        ("epoch_7", 7),
        ("latest", None),
        ("tensorboard", None),
        ("2024-05-01T12-00", None),  # dates are not steps
        ("config.yaml", None),
    ],
)
def test_step_of_real_framework_names(name, step):
    assert step_of(name) == step


class FakeLister:
    """A location as a dict of key -> (size, minutes after T0); counts the listings it serves."""

    root = "s3://b/run/"

    def __init__(self, objects):
        self.objects = {k: StoredObject(k, size, T0 + timedelta(minutes=m)) for k, (size, m) in objects.items()}
        self.calls = []

    def level(self):
        self.calls.append("level")
        folders = sorted({k.split("/", 1)[0] for k in self.objects if "/" in k})
        return folders, [o for k, o in self.objects.items() if "/" not in k]

    def tree(self, folder):
        self.calls.append(f"tree:{folder}")
        return [StoredObject(k[len(folder) + 1:], o.size, o.last_modified) for k, o in self.objects.items()
                if k.startswith(folder + "/")]

    def everything(self):
        self.calls.append("everything")
        return list(self.objects.values())


def _folders(*names, files=("a.pt", "b.pt"), size=100, minutes=None):
    objects = {}
    for i, name in enumerate(names):
        for f in files:
            objects[f"{name}/{f}"] = (size, (minutes or {}).get(name, i * 30))
    return objects


def test_newest_by_step_lists_only_the_top_level_and_the_newest_two():
    lister = FakeLister(_folders(*(f"step-{s:06d}" for s in range(100, 2100, 100))) | {"config.yaml": (5, 0)})
    scan = scan_location(lister, "s3://b/run/")
    assert (scan.newest.name, scan.previous.name, scan.checkpoints) == ("step-002000", "step-001900", 20)
    assert scan.method == BY_STEP
    assert lister.calls == ["level", "tree:step-002000", "tree:step-001900"]


def test_step_order_is_numeric_not_lexical():
    # 'checkpoint-900' sorts after 'checkpoint-10000' as text; the step decides.
    scan = scan_location(FakeLister(_folders("checkpoint-900", "checkpoint-10000")), "loc")
    assert scan.newest.name == "checkpoint-10000"


def test_single_file_checkpoints_need_no_extra_listing():
    lister = FakeLister({"ckpt-100.pt": (10, 0), "ckpt-200.pt": (10, 30), "notes.txt": (1, 99)})
    scan = scan_location(lister, "loc")
    assert (scan.newest.name, scan.previous.name) == ("ckpt-200.pt", "ckpt-100.pt")
    assert lister.calls == ["level"]


def test_folder_names_without_steps_fall_back_to_write_time():
    lister = FakeLister(_folders("alpha", "bravo", "charlie", minutes={"alpha": 50, "bravo": 10, "charlie": 30})
                        | {"config.yaml": (7, 99)})  # a file beside the folders is not a checkpoint
    scan = scan_location(lister, "loc")
    assert scan.method == BY_TIME
    assert (scan.newest.name, scan.previous.name) == ("alpha", "charlie")
    assert lister.calls == ["level", "everything"]


def test_unnumbered_files_only_are_one_checkpoint_overwritten_in_place():
    # A location that names one DCP checkpoint folder itself: its own .metadata proves it whole.
    lister = FakeLister({".metadata": (5, 21), "__0_0.distcp": (9, 10), "__1_0.distcp": (9, 10)})
    scan = scan_location(lister, "loc")
    assert scan.newest.uri == "s3://b/run/" and len(scan.newest.files) == 3 and scan.previous is None
    assert scan.newest.last_modified == T0 + timedelta(minutes=21)
    assert scan.usable is scan.newest and scan.verdict(scan.newest).complete is True
    torn = scan_location(FakeLister({"__0_0.distcp": (9, 10)}), "loc")  # the same, before .metadata
    assert torn.usable is None and torn.verdict(torn.newest).incomplete


def test_empty_location_has_no_newest():
    scan = scan_location(FakeLister({}), "loc")
    assert scan.newest is None and scan.checkpoints == 0


def _cp(name, step, files, minute=0):
    return Checkpoint(name, f"s3://b/{name}/", step, tuple(StoredObject(k, s, T0 + timedelta(minutes=minute))
                                                           for k, s in files.items()))


def test_missing_files_are_compared_with_step_numbers_masked():
    prev = _cp("step-100", 100, {"model_100.pt": 50, "optim_100.pt": 50, ".metadata": 1})
    whole = _cp("step-120", 120, {"model_120.pt": 50, "optim_120.pt": 50, ".metadata": 1})
    assert not compare(whole, prev, 0.5).incomplete
    partial = _cp("step-120", 120, {"model_120.pt": 50, "optim_120.pt": 50})
    verdict = compare(partial, prev, 0.5)
    assert verdict.missing_files == (".metadata",) and verdict.size_ratio > 0.98 and verdict.incomplete


def test_much_smaller_is_incomplete_and_a_bigger_model_is_not():
    prev = _cp("s1", 1, {"w.pt": 1000})
    assert compare(_cp("s2", 2, {"w.pt": 400}), prev, 0.5).incomplete
    assert not compare(_cp("s2", 2, {"w.pt": 600}), prev, 0.5).incomplete
    assert not compare(_cp("s2", 2, {"w.pt": 5000, "extra.pt": 1}), prev, 0.5).incomplete


def test_fewer_ranks_is_a_smaller_world_not_missing_files():
    """An elastic job resumed on half the nodes writes half the shards, each twice the size: whole."""
    prev = _cp("s1", 1, {f"model_rank{r}.pt": 100 for r in range(8)})
    verdict = compare(_cp("s2", 2, {f"model_rank{r}.pt": 200 for r in range(4)}), prev, 0.5)
    assert verdict.complete and verdict.missing_files == () and verdict.world_size == "8 ranks -> 4 ranks"
    holed = compare(_cp("s2", 2, {f"model_rank{r}.pt": 200 for r in (0, 1, 3)}), prev, 0.5)
    assert holed.incomplete and holed.missing_files == ("model_rank2.pt",)


def test_the_usable_checkpoint_skips_an_incomplete_newest():
    lister = FakeLister({"step-1/a": (100, 0), "step-1/b": (100, 0), "step-2/a": (100, 30)})
    scan = scan_location(lister, "loc")
    assert scan.usable.name == "step-1" and scan.in_progress.name == "step-2"
    whole = scan_location(FakeLister(_folders("step-1", "step-2")), "loc")
    assert whole.usable.name == "step-2" and whole.in_progress is None
