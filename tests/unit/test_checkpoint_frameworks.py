"""Each framework's completion proof, on layouts written as the framework's own writer writes them
(tests/fixtures/checkpoints, sources in its README), and the listings it takes to find them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from fmdoctor.checkpoints.local import LocalLister
from fmdoctor.checkpoints.model import COMPARISON, MARKER, StoredObject
from fmdoctor.checkpoints.scan import MAX_WALK_BACK, scan_location
from fmdoctor.engine.host import LocalHost

from .checkpoint_layouts import ListingLister, layout, to_directory

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def scan(name, minutes_ago=5, **lister_options):
    lister = ListingLister(layout(name, minutes_ago, NOW), **lister_options)
    return scan_location(lister, "s3://b/run/"), lister


def proof_text(result, checkpoint):
    verdict = result.verdict(checkpoint)
    return " ".join(verdict.proofs + verdict.reasons)


def test_pytorch_dcp_is_whole_when_metadata_was_written_last():
    # Source: pytorch torch/distributed/checkpoint/filesystem.py (finish); torchtitan checkpointer/dcp.py.
    result, lister = scan("dcp-torchtitan")
    assert (result.newest.name, result.usable.name) == ("step-3000", "step-3000")
    assert result.verdict(result.usable).method == MARKER
    assert "PyTorch DCP .metadata written beside 8 rank(s)" in proof_text(result, result.usable)
    assert lister.calls == ["level", "tree:step-3000", "tree:step-2000"]  # one delimiter listing, the newest two


def test_elastic_resume_on_fewer_ranks_is_whole():
    # 64 ranks, then 32 after a Spot loss: the file set shrinks and nothing is missing.
    result, _ = scan("dcp-elastic-resize")
    assert result.usable.name == "step-1200" and result.verdict(result.newest).complete
    assert "32 rank(s)" in proof_text(result, result.newest)


def test_dcp_save_that_died_before_metadata_is_not_usable():
    result, _ = scan("dcp-died-before-metadata")
    assert result.newest.name == "step-1400" and result.verdict(result.newest).incomplete
    assert "before StorageWriter.finish" in proof_text(result, result.newest)
    assert result.usable.name == "step-1200" and result.in_progress.name == "step-1400"


def test_deepspeed_tag_saved_after_latest_was_rewritten_is_not_committed():
    # Source: DeepSpeed runtime/engine.py save_checkpoint: 'latest' is rewritten once every rank has saved.
    result, _ = scan("deepspeed-zero3-latest")
    assert result.newest.name == "global_step300" and result.verdict(result.newest).incomplete
    assert "DeepSpeed's 'latest' file was last rewritten" in proof_text(result, result.newest)
    assert result.usable.name == "global_step200"
    assert "DeepSpeed's 'latest' file was rewritten" in proof_text(result, result.usable)
    assert result.checkpoints == 3  # 'latest' and zero_to_fp32.py beside the tags are not checkpoints


def test_deepspeed_without_latest_resumed_on_fewer_ranks_is_whole():
    # save_latest=False leaves no marker: the comparison decides, and a smaller world is not missing files.
    result, _ = scan("deepspeed-zero3-no-latest")
    verdict = result.verdict(result.newest)
    assert verdict.method == COMPARISON and verdict.complete and verdict.missing_files == ()
    assert verdict.world_size == "8x1 ranks -> 4x1 ranks"
    assert result.usable.name == "global_step200"


def test_deepspeed_without_latest_and_a_hole_in_its_ranks_is_incomplete():
    result, _ = scan("deepspeed-zero3-no-latest-hole")
    verdict = result.verdict(result.newest)
    assert verdict.method == COMPARISON and verdict.incomplete and verdict.world_size is None
    assert verdict.missing_files == ("bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt",
                                     "zero_pp_rank_2_mp_rank_00_model_states.pt")
    assert result.usable.name == "global_step100"


def test_megatron_iteration_saved_after_the_tracker_is_not_committed():
    # Source: Megatron-LM megatron/training/checkpointing.py: the tracker is written after a barrier.
    result, _ = scan("megatron-tracker")
    assert result.newest.name == "iter_0003000" and result.verdict(result.newest).incomplete
    assert "Megatron's tracker file" in proof_text(result, result.newest)
    assert result.usable.name == "iter_0002000"


def test_nemo_unfinished_marker_is_never_the_checkpoint_to_resume_from():
    # Source: NeMo model_checkpoint.py (the '-unfinished' marker), resume.py (resumes from finished '*last').
    result, _ = scan("nemo-unfinished")
    newest = "megatron_gpt--val_loss=2.17-step=2000-consumed_samples=256000.0-last"
    assert result.newest.name == newest and result.verdict(result.newest).incomplete
    assert f"NeMo's marker {newest}-unfinished" in proof_text(result, result.newest)
    assert result.usable.name == "megatron_gpt--val_loss=2.31-step=1000-consumed_samples=128000.0-last"
    assert "no '-unfinished' marker" in proof_text(result, result.usable)
    assert ".metadata written beside 4 rank(s) of shards in weights/" in proof_text(result, result.usable)
    assert all(not c.endswith("-unfinished") for c in result.verdicts)


def test_hf_trainer_staging_folder_is_never_a_step_to_resume_from():
    # Source: transformers trainer.py _save_checkpoint (trainer_state.json last), trainer_utils.get_last_checkpoint.
    result, _ = scan("hf-trainer-staging")
    assert result.newest.name == "tmp-checkpoint-1500" and result.verdict(result.newest).incomplete
    assert "staging folder" in proof_text(result, result.newest)
    assert result.usable.name == "checkpoint-1000"
    assert "wrote trainer_state.json" in proof_text(result, result.usable)


def test_sagemaker_sync_that_has_not_reached_trainer_state_is_not_usable_yet():
    # Source: SageMaker model-checkpoints.html: /opt/ml/checkpoints is copied to S3 as files are written.
    result, _ = scan("hf-trainer-sagemaker-sync")
    assert result.newest.name == "checkpoint-1000" and result.verdict(result.newest).incomplete
    assert "no trainer_state.json in checkpoint-1000" in proof_text(result, result.newest)
    assert result.usable.name == "checkpoint-500"


def test_lightning_last_ckpt_newer_than_every_top_k_file_is_the_newest():
    # Source: Lightning model_checkpoint.py (_save_last_checkpoint after each save), cloud_io._atomic_save.
    result, lister = scan("lightning-last")
    assert (result.newest.name, result.previous.name) == ("last.ckpt", "epoch=0-step=2000.ckpt")
    assert result.usable.name == "last.ckpt" and "one transaction" in proof_text(result, result.usable)
    assert lister.calls == ["level"]  # single-file checkpoints: the top-level listing is all it takes


def test_directory_bucket_listing_out_of_order_with_uploads_in_flight():
    """S3 Express One Zone: keys come back unordered, and a prefix shows for a save whose multipart
    uploads are in flight (it lists no object). Order comes from step numbers, never from the listing."""
    result, lister = scan("dcp-torchtitan", shuffled=True, in_flight=("step-4000",))
    assert (result.newest.name, result.previous.name, result.usable.name) == ("step-3000", "step-2000", "step-3000")
    assert lister.calls == ["level", "tree:step-4000", "tree:step-3000", "tree:step-2000"]


def test_older_checkpoints_are_listed_only_while_the_newer_are_proven_incomplete():
    objects = [o for o in layout("dcp-torchtitan", 5, NOW) if o.key not in {"step-3000/.metadata",
                                                                            "step-2000/.metadata"}]
    lister = ListingLister(objects)
    result = scan_location(lister, "s3://b/run/")
    assert result.usable.name == "step-1000" and result.newest.name == "step-3000"
    assert lister.calls == ["level", "tree:step-3000", "tree:step-2000", "tree:step-1000"]
    none_whole = ListingLister([o for o in objects if not o.key.endswith(".metadata")])
    assert scan_location(none_whole, "s3://b/run/").usable is None
    assert len(none_whole.calls) == 1 + 2 + 1  # level, the newest two, then the only older one (bound 3)
    assert MAX_WALK_BACK == 3


def test_lightning_save_last_link_on_a_node(tmp_path):
    """save_last="link": last.ckpt is a symlink to the newest save; find -printf reports it with its target."""
    root = tmp_path / "ckpt"
    to_directory(root, [o for o in layout("lightning-last", 10) if o.key != "last.ckpt"])
    (root / "last.ckpt").symlink_to("epoch=0-step=2000.ckpt")
    lister = LocalLister(LocalHost(), str(root))
    folders, files = lister.level()
    assert {f.key: f.link_target for f in files}["last.ckpt"] == "epoch=0-step=2000.ckpt"
    result = scan_location(lister, str(root))
    assert result.newest.name == result.usable.name == "epoch=0-step=2000.ckpt"


@pytest.mark.parametrize("name", ["dcp-torchtitan", "deepspeed-zero3-latest", "nemo-unfinished", "megatron-tracker"])
def test_a_node_listing_finds_what_s3_finds(tmp_path, name):
    """The same layout on a node's disk (or FSx mounted there), read with find: the same verdicts."""
    objects = layout(name, 5)
    to_directory(tmp_path / name, objects)
    local = scan_location(LocalLister(LocalHost(), str(tmp_path / name)), "local")
    remote = scan_location(ListingLister(objects), "s3://b/run/")
    assert (local.newest.name, local.usable.name) == (remote.newest.name, remote.usable.name)
    assert {k: v.complete for k, v in local.verdicts.items()} == {k: v.complete for k, v in remote.verdicts.items()}


def test_a_synced_copy_with_metadata_but_a_missing_rank_is_not_usable_yet():
    """SageMaker (or an FSx export) copies files as they are written: .metadata, small and written last, can
    land in S3 before a large shard of an earlier rank does. A hole in the ranks says the copy is not whole."""
    objects = [o for o in layout("dcp-torchtitan", 5, NOW) if o.key != "step-3000/__5_0.distcp"]
    result = scan_location(ListingLister(objects), "s3://b/run/")
    assert result.verdict(result.newest).incomplete and result.usable.name == "step-2000"
    # A hint, not a proof: a writer may skip a rank with nothing to save (see the Megatron case below).
    assert not result.verdict(result.newest).proven
    assert "1 shard(s) missing from the rank grid" in proof_text(result, result.newest)


def test_nemo_save_last_link_resumes_from_what_the_last_links_point_to(tmp_path):
    """save_last="link": '<name>-last' is a symlink to the top-k folder (NeMo _link_checkpoint); a top-k
    folder no '-last' link points to is not what AutoResume loads."""
    n1 = "megatron_gpt--val_loss=2.31-step=1000-consumed_samples=128000.0"
    n2 = "megatron_gpt--val_loss=2.17-step=2000-consumed_samples=256000.0"
    top_k = [o for o in layout("nemo-unfinished", 10)
             if not o.key.split("/", 1)[0].endswith(("-last", "-unfinished"))]
    root = tmp_path / "checkpoints"
    to_directory(root, top_k)
    (root / f"{n1}-last").symlink_to(n1)
    result = scan_location(LocalLister(LocalHost(), str(root)), str(root))
    assert result.newest.name == result.usable.name == n1 and result.checkpoints == 1  # n2 has no '-last' yet
    (root / f"{n2}-last").symlink_to(n2)
    result = scan_location(LocalLister(LocalHost(), str(root)), str(root))
    assert result.newest.name == result.usable.name == n2


# --- Frameworks added for issue 37: each complete, in progress, died mid-save and resumed on fewer ranks -----

@pytest.mark.parametrize("root", ["s3://b/run/", "/fsx/run/"])
def test_accelerate_save_state_numbered_below_the_process_count_is_whole(root):
    """The issue's false critical: checkpoint_3 holds random_states_0..15.pkl for 16 processes."""
    result, _ = scan("accelerate-save-state", root=root)
    verdict = result.verdict(result.newest)
    assert (result.newest.name, result.usable.name) == ("checkpoint_3", "checkpoint_3")
    assert verdict.complete and verdict.proven and verdict.framework == "Hugging Face Accelerate"
    assert "for all 16 process(es) 0-15 in checkpoint_3" in proof_text(result, result.newest)


def test_accelerate_save_that_died_in_the_main_process_is_incomplete():
    # The main process died writing optimizer.bin: the 15 others wrote their random states, process 0 did not.
    result, _ = scan("accelerate-died-mid-save")
    verdict = result.verdict(result.newest)
    assert verdict.incomplete and verdict.proven and result.usable.name == "checkpoint_2"
    assert "random_states_0.pkl is missing from checkpoint_3" in proof_text(result, result.newest)


def test_accelerate_resumed_on_fewer_processes_is_whole():
    result, _ = scan("accelerate-fewer-processes")
    assert result.usable.name == "checkpoint_3" and "8 process(es) 0-7" in proof_text(result, result.newest)


@pytest.mark.parametrize("root", ["s3://b/run/", "/fsx/run/"])
def test_orbax_committed_steps_with_random_ocdbt_names_are_whole(root):
    """The issue's second false critical: every save's OCDBT data files have new random 128-bit hex names."""
    result, _ = scan("orbax-maxtext", root=root)
    assert (result.newest.name, result.usable.name) == ("2000", "2000")
    assert result.verdict(result.newest).framework == "Orbax"
    assert "wrote commit_success.txt into 2000" in proof_text(result, result.newest)


def test_orbax_temporary_folder_is_never_the_usable_step():
    result, _ = scan("orbax-tmp-in-progress")
    assert result.newest.name == "3000.orbax-checkpoint-tmp" and result.verdict(result.newest).incomplete
    assert result.usable.name == "2000" and result.in_progress is result.newest
    assert "Orbax's temporary folder" in proof_text(result, result.newest)


def test_orbax_step_without_its_commit_file_is_not_committed():
    # CommitFileTemporaryPath (S3, GCS) saves into the final folder and commits by writing commit_success.txt.
    result, _ = scan("orbax-s3-no-commit")
    assert result.verdict(result.newest).incomplete and result.usable.name == "2000"
    assert "no commit_success.txt in 3000" in proof_text(result, result.newest)


def test_orbax_rename_still_copying_on_s3_is_not_whole():
    """On S3 a rename copies object by object and deletes the temporary folder last."""
    objects = layout("orbax-maxtext", 5, NOW)
    copying = [o for o in objects if o.key.startswith("2000/")]
    objects += [replace(o, key="2000.orbax-checkpoint-tmp/" + o.key.split("/", 1)[1]) for o in copying]
    result = scan_location(ListingLister(objects), "s3://b/run/")
    assert result.verdict(result.previous).incomplete and result.previous.name == "2000"
    assert result.usable.name == "1000"
    assert "still beside 2000" in proof_text(result, result.previous)


def test_orbax_resumed_on_fewer_hosts_is_whole():
    result, _ = scan("orbax-fewer-processes")
    assert result.usable.name == "3000" and result.verdict(result.newest).proven


def test_old_orbax_without_commit_files_is_whole_by_its_rename_on_a_file_system_only():
    objects = [o for o in layout("orbax-maxtext", 30, NOW) if not o.key.endswith("commit_success.txt")]
    local = scan_location(ListingLister(objects, root="/fsx/run/"), "/fsx/run/")
    assert local.verdict(local.newest).proven and "atomic rename" in proof_text(local, local.newest)
    remote = scan_location(ListingLister(objects), "s3://b/run/")
    assert remote.verdict(remote.newest).method == COMPARISON and not remote.verdict(remote.newest).proven


def test_composer_monolithic_saves_on_s3_are_whole_objects():
    result, lister = scan("composer-monolithic")
    assert result.usable.name == "ep0-ba3000-rank0.pt" and result.newest.step == 3000
    assert "one S3 object" in proof_text(result, result.newest) and lister.calls == ["level"]


def test_composer_save_not_yet_pointed_at_by_latest_rank0_on_a_node(tmp_path):
    """Composer repoints latest-rank0.pt after dist.barrier: a newer file it does not name did not finish."""
    root = tmp_path / "checkpoints"
    to_directory(root, layout("composer-monolithic", 30))
    (root / "latest-rank0.pt").symlink_to("ep0-ba2000-rank0.pt")
    result = scan_location(LocalLister(LocalHost(), str(root)), str(root))
    assert result.newest.name == "ep0-ba3000-rank0.pt" and result.verdict(result.newest).incomplete
    assert result.usable.name == "ep0-ba2000-rank0.pt" and result.verdict(result.usable).proven
    (root / "latest-rank0.pt").unlink()
    (root / "latest-rank0.pt").symlink_to("ep0-ba3000-rank0.pt")
    result = scan_location(LocalLister(LocalHost(), str(root)), str(root))
    assert result.usable.name == "ep0-ba3000-rank0.pt" and "latest-rank0 points at" in proof_text(result, result.usable)


def test_composer_sharded_saves_are_pytorch_dcp():
    result, _ = scan("composer-sharded")
    assert result.usable.name == "ep0-ba2000" and result.verdict(result.usable).framework == "PyTorch DCP"


def test_megatron_dist_checkpoint_without_metadata_json_is_incomplete():
    # Source: Megatron-LM dist_checkpointing/serialization.py save(): metadata.json in the finalize step, last.
    result, _ = scan("megatron-dist-ckpt")
    verdict = result.verdict(result.newest)
    assert verdict.incomplete and "no metadata.json in iter_0003000" in proof_text(result, result.newest)
    assert result.usable.name == "iter_0002000"
    assert "Megatron dist-checkpointing wrote metadata.json" in proof_text(result, result.usable)


def test_torchtitan_hf_export_is_whole_by_its_shard_count_and_index():
    result, _ = scan("torchtitan-hf-export")
    assert result.usable.name == "step-2000" and "all 4 safetensors shard(s)" in proof_text(result, result.usable)
    lacking = [o for o in layout("torchtitan-hf-export", 5, NOW) if "00003-of" not in o.key]
    torn = scan_location(ListingLister(lacking), "s3://b/run/")
    assert torn.verdict(torn.newest).incomplete and torn.usable.name == "step-1000"
    assert "1 of the 4 safetensors shards" in proof_text(torn, torn.newest)


@pytest.mark.parametrize("name", ["accelerate-save-state", "orbax-maxtext", "composer-sharded", "megatron-dist-ckpt",
                                  "torchtitan-hf-export"])
def test_new_layouts_on_a_node_find_what_s3_finds_where_the_rule_is_the_same(tmp_path, name):
    objects = layout(name, 5)
    to_directory(tmp_path / name, objects)
    local = scan_location(LocalLister(LocalHost(), str(tmp_path / name)), "local")
    remote = scan_location(ListingLister(objects), "s3://b/run/")
    assert (local.newest.name, local.usable.name) == (remote.newest.name, remote.usable.name)


def test_dcp_hf_rank_pieces_are_not_an_unindexed_safetensors_series():
    # Source: pytorch _hf_utils.py SHARDED_FILE_NAME, hf_storage.py finish (no index for the per-rank pieces,
    # left under sharded/ after consolidation). They once read as series 'shard-00001-model' without its index.
    result, _ = scan("torchtitan-hf-distributed")
    whole = next(v for name, v in result.verdicts.items() if name == "step-2000")
    assert whole.complete and whole.method == MARKER and "safetensors shard(s)" in " ".join(whole.proofs)
    died = result.verdict(result.newest)
    assert result.newest.name == "step-3000" and not died.proven  # no proof either way: a hint at most
    assert died.method == COMPARISON and died.incomplete
    assert result.usable.name == "step-2000"


def test_a_location_of_runs_reads_each_run_as_a_location():
    # An old save that died in run1 (torchtitan resumes from the newest step with .metadata and never purges
    # it) once made the whole run1 folder 'incomplete', critical, and measured staleness from run0.
    result, lister = scan("nested-runs")
    assert (result.newest.name, result.usable.name) == ("llama-8b-run1/step-1800", "llama-8b-run1/step-1800")
    assert result.usable.uri == "s3://b/run/llama-8b-run1/step-1800/"
    assert result.verdict(result.usable).proven and "8 rank(s)" in proof_text(result, result.usable)
    assert "tensorboard" not in result.verdicts  # a location of runs: its other folders are no checkpoints
    assert lister.calls == ["level", "everything"]  # the runs are read from the listing in hand


def test_deepspeed_universal_checkpoint_is_judged_by_latest_universal_not_latest():
    # Source: DeepSpeed checkpoint/ds_to_universal.py writes <tag>_universal/ after the save, then
    # latest_universal. Judged by 'latest', the converted folder was a false critical 'save that died'.
    result, _ = scan("deepspeed-universal")
    assert result.newest.name == "global_step200_universal" and result.usable is result.newest
    assert result.verdict(result.newest).proven and result.verdict(result.newest).complete
    assert "'latest_universal' file" in proof_text(result, result.newest)


def test_deepspeed_universal_conversion_that_died_is_not_usable():
    objects = [o for o in layout("deepspeed-universal", 5, NOW) if o.key != "latest_universal"]
    older = replace(next(o for o in layout("deepspeed-universal", 5, NOW) if o.key == "latest_universal"),
                    last_modified=datetime(2025, 5, 1, tzinfo=UTC))  # an earlier conversion's pointer
    result = scan_location(ListingLister(objects + [older]), "s3://b/run/")
    assert result.verdict(result.newest).proven and result.verdict(result.newest).incomplete
    assert result.usable.name == "global_step200"


def test_accelerate_save_still_writing_its_registered_objects_is_not_usable():
    # Source: accelerate accelerator.py save_state: save_custom_state (custom_checkpoint_<i>.pkl) runs after
    # save_accelerator_state's random_states files. Cut there, the save was once proven whole and usable.
    objects = [o for o in layout("accelerate-save-state", 5, NOW) if o.key != "checkpoint_3/custom_checkpoint_0.pkl"]
    result = scan_location(ListingLister(objects), "s3://b/run/")
    verdict = result.verdict(result.newest)
    assert result.newest.name == "checkpoint_3" and verdict.proven and verdict.incomplete
    assert "custom_checkpoint_0.pkl is missing" in proof_text(result, result.newest)
    assert result.usable.name == "checkpoint_2"
    assert "then its 1 registered object(s)" in proof_text(result, result.usable)


def test_megatron_rank_that_had_nothing_to_save_is_no_hole():
    # Source: Megatron-LM dist_checkpointing/strategies/filesystem_async.py: a rank whose plan has no items
    # (has_data_to_write False) writes no __<rank>_*.distcp; .metadata once made that a proven critical.
    objects = [o for o in layout("megatron-dist-ckpt", 5, NOW) if not o.key.endswith("/__6_0.distcp")]
    result = scan_location(ListingLister(objects), "s3://b/run/")
    assert result.usable.name == "iter_0002000" and result.verdict(result.usable).proven
    assert "Megatron dist-checkpointing wrote metadata.json" in proof_text(result, result.usable)


def test_runs_deeper_in_a_location_are_read_as_locations_too():
    # 'team/llama/run1/step-N': the group 'llama' holds runs, not step-numbered saves, one level down.
    objects = [replace(o, key=f"llama/{o.key}") for o in layout("nested-runs", 5, NOW)]
    objects += [replace(o, key=f"mistral/{o.key}", last_modified=o.last_modified.replace(year=2024))
                for o in layout("nested-runs", 5, NOW)]
    result = scan_location(ListingLister(objects), "s3://b/team/")
    assert result.usable.name == "llama/llama-8b-run1/step-1800" and result.usable is result.newest
    assert result.verdict(result.usable).proven


def test_the_first_trainer_save_cut_before_trainer_state_is_not_proven_whole_by_deepspeed_inside_it():
    # Source: transformers trainer.py: _save writes training_args.bin with the model; with DeepSpeed,
    # _save_optimizer_and_scheduler runs model_wrapped.save_checkpoint (global_step<N>/ and 'latest'), then
    # scheduler, rng states and trainer_state.json last. With no other checkpoint-<N> to learn from, the
    # nested 'latest' once proved the first save whole while Trainer was still writing it.
    def at(second, key, size=100):
        return StoredObject(key, size, datetime(2025, 6, 1, 11, 0, second, tzinfo=UTC))
    objects = [at(0, "checkpoint-500/config.json"), at(1, "checkpoint-500/training_args.bin"),
               at(2, "checkpoint-500/global_step500/mp_rank_00_model_states.pt"),
               at(3, "checkpoint-500/global_step500/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
               at(4, "checkpoint-500/latest"), at(5, "checkpoint-500/zero_to_fp32.py")]
    cut = scan_location(ListingLister(objects), "s3://b/run/")
    assert cut.verdict(cut.newest).proven and cut.verdict(cut.newest).incomplete and cut.usable is None
    whole = scan_location(ListingLister(objects + [at(9, "checkpoint-500/trainer_state.json")]), "s3://b/run/")
    assert whole.usable.name == "checkpoint-500" and whole.verdict(whole.usable).proven
