"""checkpoint-stale, -missing and -incomplete against moto S3, a loopback-free local directory, and FSx
through botocore's Stubber (moto has no DescribeDataRepositoryAssociations)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from botocore.stub import Stubber

from fmdoctor.checkpoints import s3 as s3_listing
from fmdoctor.config import Settings
from fmdoctor.demo.seed_health import dcp_files, write_checkpoint
from fmdoctor.engine.api import Connection, Doctor, new_aws
from fmdoctor.engine.host import LocalHost
from fmdoctor.engine.model import Severity, Status
from fmdoctor.runbooks import get_runbook

from ..conftest import CLUSTER, REGION
from .checkpoint_layouts import layout, to_directory, to_s3

IDS = ["checkpoint-missing", "checkpoint-stale", "checkpoint-incomplete"]
BUCKET = "team-ckpt"
LOCATION = f"s3://{BUCKET}/llm/run-7/"


@pytest.fixture
def node(builder):
    """A one-node cluster: what these tests vary is its checkpoints."""
    builder.security_group("efa", self_ingress=True, self_egress=True)
    builder.launch(["gpu-1"], "p4d.24xlarge", "private-a", ["efa"])
    return builder


@pytest.fixture
def bucket(aws, node):
    aws.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    return aws


def save(session, steps_and_ages, files=None, prefix="llm/run-7/"):
    now = datetime.now(UTC)
    for step, minutes_ago in steps_and_ages:
        write_checkpoint(session, BUCKET, prefix, f"step-{step:06d}", files or dcp_files(shards=4),
                         now - timedelta(minutes=minutes_ago))


def test_fresh_whole_checkpoints_are_healthy_in_three_listings(bucket, run_checks):
    save(bucket, [(100, 90), (200, 60), (300, 30), (400, 20)])
    report = run_checks(IDS, checkpoints={"locations": [LOCATION], "max_age": "1h"})
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
    assert report.stats.checks_run == IDS
    # One delimiter listing of the top level, then the newest two folders: shared by the three checks.
    assert report.stats.api_calls["s3.ListObjectsV2"] == 3


def test_delimiter_listing_pages_by_checkpoint_not_by_object(bucket, run_checks, monkeypatch):
    save(bucket, [(step, 400 - step // 10) for step in range(10, 310, 10)])  # 30 checkpoints x 5 files
    monkeypatch.setattr(s3_listing, "PAGE_SIZE", 10)
    report = run_checks(["checkpoint-stale"], checkpoints={"locations": [LOCATION], "max_age": "1d"})
    assert report.findings == []
    # 3 pages of 10 common prefixes + 1 page per newest folder; every object would be 15 pages.
    assert report.stats.api_calls["s3.ListObjectsV2"] == 5


def test_stale_newest_checkpoint(bucket, run_checks):
    save(bucket, [(100, 260), (200, 200)])
    report = run_checks(IDS, checkpoints={"locations": [LOCATION], "max_age": "2h"})
    [finding] = report.findings
    assert (finding.check, finding.severity, finding.resource) == ("checkpoint-stale", Severity.WARNING, LOCATION)
    assert finding.evidence["newest"] == f"{LOCATION}step-000200/"
    assert finding.evidence["step"] == 200 and finding.evidence["max_age"] == "2h"
    assert 199 * 60 <= finding.evidence["age_s"] <= 201 * 60
    assert re.search(r"written 3h(19|20)m ago, more than the allowed 2h", finding.summary)
    assert report.exit_code == 1


def test_checkpoint_slightly_in_the_future_is_fresh(bucket, run_checks):
    """S3's clock ahead of ours (skew): age is never negative, and a fresh checkpoint is not stale."""
    save(bucket, [(100, 30), (200, -2)])
    report = run_checks(["checkpoint-stale"], checkpoints={"locations": [LOCATION], "max_age": "10m"})
    assert report.findings == [] and report.status is Status.OK


def test_missing_when_prefix_is_empty_or_bucket_absent(bucket, run_checks):
    save(bucket, [(100, 5)], prefix="other-run/")
    absent = "s3://no-such-ckpt-bucket/x/"
    report = run_checks(IDS, checkpoints={"locations": [LOCATION, absent]})
    missing = {f.resource: f for f in report.findings_for("checkpoint-missing")}
    assert set(missing) == {LOCATION, absent}
    assert missing[absent].evidence["problem"] == "bucket no-such-ckpt-bucket does not exist"
    assert "No checkpoint found" in missing[LOCATION].summary
    assert {s.check for s in report.skipped} == {"checkpoint-stale", "checkpoint-incomplete"}
    assert report.errors == []


def test_dcp_save_that_died_before_metadata_is_incomplete_by_its_marker(bucket, run_checks):
    save(bucket, [(100, 90), (200, 60)])
    partial = {k: v for k, v in dcp_files(shards=4).items() if k not in {".metadata", "__3_0.distcp"}}
    save(bucket, [(300, 30)], files=partial)
    report = run_checks(IDS, checkpoints={"locations": [LOCATION], "max_age": "2h"})
    [finding] = report.findings
    assert (finding.check, finding.severity) == ("checkpoint-incomplete", Severity.CRITICAL)
    assert finding.resource == f"{LOCATION}step-000300/"
    assert finding.evidence["proof"]["method"] == "framework marker"
    assert finding.evidence["proof"]["proven"] and finding.evidence["proof"]["framework"] == "PyTorch DCP"
    assert "(PyTorch DCP's own proof)" in finding.summary
    runbook = get_runbook("checkpoint-incomplete").render(finding, cluster=CLUSTER, region=REGION)
    assert "by PyTorch DCP's own proof" in runbook and "**may**" not in runbook
    assert "before StorageWriter.finish" in finding.evidence["reasons"][0]
    assert finding.evidence["resume_from"]["uri"] == f"{LOCATION}step-000200/"
    assert finding.evidence["usable"] == f"{LOCATION}step-000200/"
    assert "resumes from step-000200" in finding.summary
    assert report.stats.api_calls["s3.ListObjectsV2"] == 3


def test_stale_measures_the_usable_checkpoint_not_a_newer_one_that_died(bucket, run_checks):
    """A save that died 30 minutes ago is not work a restart keeps: the age counts from step-000200."""
    save(bucket, [(100, 150), (200, 100)])
    partial = {k: v for k, v in dcp_files(shards=4).items() if k != ".metadata"}
    save(bucket, [(300, 30)], files=partial)
    report = run_checks(["checkpoint-stale"], checkpoints={"locations": [LOCATION], "max_age": "1h"})
    [finding] = report.findings
    assert finding.evidence["usable"] == f"{LOCATION}step-000200/" and finding.evidence["age_s"] >= 99 * 60
    assert finding.evidence["newest"] == f"{LOCATION}step-000300/"
    assert "step-000300 is incomplete" in finding.summary


def test_a_save_under_way_is_not_stale_within_the_write_grace(bucket, run_checks):
    """The interval ran over because the next save is being written right now (no .metadata yet)."""
    save(bucket, [(100, 120), (200, 65)])
    save(bucket, [(300, 2)], files={k: v for k, v in dcp_files(shards=4).items() if k != ".metadata"})
    settings = {"locations": [LOCATION], "max_age": "1h", "write_grace": "15m"}
    assert run_checks(["checkpoint-stale", "checkpoint-incomplete"], checkpoints=settings).findings == []
    settings["max_age"] = "45m"  # over the interval even counting the grace: stale, and it says a save is under way
    [finding] = run_checks(["checkpoint-stale"], checkpoints=settings).findings
    assert finding.evidence["save_under_way"] is True and "under way" in finding.summary


def test_incomplete_by_size_is_a_hint_and_a_save_in_progress_is_not_judged(bucket, run_checks):
    """No framework marker in these folders: a third of the predecessor's size is a warning that says it is a
    comparison and why it could be wrong, never a critical."""
    save(bucket, [(100, 90), (200, 60)], files={"model.pt": 10_000})
    save(bucket, [(300, 40)], files={"model.pt": 3_000})
    [finding] = run_checks(["checkpoint-incomplete"], checkpoints={"locations": [LOCATION]}).findings
    assert finding.severity is Severity.WARNING
    assert finding.evidence["size_ratio"] == 0.3 and finding.evidence["missing_count"] == 0
    assert finding.evidence["proof"]["proven"] is False and "framework" not in finding.evidence["proof"]
    assert "not a framework's proof" in finding.summary and "changed what it saves" in finding.summary
    assert "trainer_state.json" in finding.evidence["would_prove"]
    runbook = get_runbook("checkpoint-incomplete").render(finding, cluster=CLUSTER, region=REGION)
    assert "**may** not\nbe whole" in runbook and "What would prove it either way" in runbook
    save(bucket, [(400, 3)], files={"model.pt": 1_000})  # being written right now: within write_grace
    assert run_checks(["checkpoint-incomplete"], checkpoints={"locations": [LOCATION]}).findings == []


def test_no_framework_proof_is_not_verified_never_healthy_nor_not_applicable(bucket, run_checks):
    save(bucket, [(100, 90)], files={"weights.bin": 10_000, "opt.bin": 5})
    report = run_checks(["checkpoint-incomplete"], checkpoints={"locations": [LOCATION]})
    [error] = report.errors
    assert report.findings == [] and report.skipped == [] and error.code == "NoFrameworkProof"
    assert error.unverified == f"whether the newest checkpoint {LOCATION}step-000100/ is whole"
    assert "what would prove it" in error.message and report.status is not Status.OK
    save(bucket, [(200, 60)], files={"weights.bin": 10_000, "opt.bin": 5})  # alike: still only a comparison
    [error] = run_checks(["checkpoint-incomplete"], checkpoints={"locations": [LOCATION]}).errors
    assert error.code == "NoFrameworkProof" and "compared with step-000100" in error.message


@pytest.mark.parametrize("fixture, prefix", [("accelerate-save-state", "proj/checkpoints/"), ("orbax-maxtext", "mt/")])
def test_the_issues_false_criticals_are_gone(bucket, run_checks, fixture, prefix):
    """Accelerate's checkpoint_3 with random_states_0..15.pkl, and Orbax steps whose OCDBT data files have new
    random names every save, written as their writers write them (tests/fixtures/checkpoints)."""
    to_s3(bucket, BUCKET, prefix, layout(fixture, 20))
    location = f"s3://{BUCKET}/{prefix}"
    report = run_checks(IDS, checkpoints={"locations": [location], "max_age": "1h"})
    assert report.findings == [] and report.errors == [] and report.status is Status.OK


def test_stale_says_which_proof_made_the_checkpoint_usable(bucket, run_checks):
    to_s3(bucket, BUCKET, "mt/", layout("orbax-tmp-in-progress", 200))
    [finding] = run_checks(["checkpoint-stale"], checkpoints={"locations": [f"s3://{BUCKET}/mt/"],
                                                               "max_age": "1h"}).findings
    assert finding.evidence["usable"] == f"s3://{BUCKET}/mt/2000/"
    assert finding.evidence["proof"]["framework"] == "Orbax" and finding.evidence["proof"]["proven"] is True
    assert "(2000, proven whole by Orbax's own marker)" in finding.summary
    assert "3000.orbax-checkpoint-tmp is incomplete" in finding.summary


def test_listing_denied_is_an_error_entry_not_healthy(bucket, run_with_faults, faults):
    save(bucket, [(100, 10)])
    faults.fail("s3", "ListObjectsV2", "AccessDenied", "Access Denied", 403)  # S3 names no action
    report = run_with_faults(IDS, checkpoints={"locations": [LOCATION]})
    # The only location could not be read and nothing else was selected: nothing verified, so unknown.
    assert report.findings == [] and report.status is Status.UNKNOWN and report.stats.checks_run == []
    assert {e.check for e in report.errors} == set(IDS)
    assert {(e.code, e.iam_action) for e in report.errors} == {("AccessDenied", "s3:ListBucket")}
    assert report.stats.api_calls["s3.ListObjectsV2"] == 1  # memoised: one denied call for three checks


def test_not_configured_or_not_readable_here_is_skipped(node, run_checks):
    report = run_checks(IDS)
    assert {s.check for s in report.skipped} == set(IDS) and "no checkpoint location" in report.skipped[0].reason
    local = run_checks(IDS, checkpoints={"locations": ["/fsx/ckpt"]})
    assert "fmdoctor check --local" in local.skipped[0].reason and local.findings == []


def test_flags_override_the_config(bucket, capsys):
    from fmdoctor.cli.main import main

    save(bucket, [(100, 50)])
    argv = ["check", "--cluster", CLUSTER, "--region", REGION, "--format", "json", "--no-progress",
            "--only", "checkpoint", "--checkpoint", LOCATION]
    assert main([*argv, "--checkpoint-max-age", "30m"]) == 1
    assert [f["check"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["checkpoint-stale"]
    assert main([*argv, "--checkpoint-max-age", "90m"]) == 0
    capsys.readouterr()
    assert main([*argv, "--checkpoint-max-age", "soon"]) == 3
    assert "checkpoints.max_age" in capsys.readouterr().err


# --- FSx for Lustre: moto has DescribeFileSystems but no data repository associations -------------------

FS = "fs-0123456789abcdef0"


def _fsx_factory(associations, file_system_type="LUSTRE", legacy_export=None):
    """Sessions whose FSx client is a Stubber answering with the real API's response shapes. Each response
    is queued once, so a second call of either operation would fail the run (Stubber answers before the
    session's call counter, so stats.api_calls does not show them)."""

    def factory(options):
        aws = new_aws(options)
        stub = Stubber(aws.client("fsx"))
        factory.stubs.append(stub)
        lustre = {"DataRepositoryConfiguration": {"ExportPath": legacy_export}} if legacy_export else {}
        stub.add_response("describe_file_systems", {"FileSystems": [{
            "FileSystemId": FS, "FileSystemType": file_system_type, "Lifecycle": "AVAILABLE",
            "LustreConfiguration": lustre}]}, {"FileSystemIds": [FS]})
        if file_system_type == "LUSTRE":
            stub.add_response("describe_data_repository_associations", {"Associations": associations},
                              {"Filters": [{"Name": "file-system-id", "Values": [FS]}], "MaxResults": 25})
        stub.activate()
        return aws

    factory.stubs = []
    return factory


def _dra(path="/ckpt", repo=f"s3://{BUCKET}/exported", events=("NEW", "CHANGED", "DELETED")):
    return {"AssociationId": "dra-0a1b2c3d4e5f60718", "FileSystemId": FS, "Lifecycle": "AVAILABLE",
            "FileSystemPath": path, "DataRepositoryPath": repo,
            "S3": {"AutoExportPolicy": {"Events": list(events)}}}


def _run_fsx(factory, location=f"fsx://{FS}/ckpt/run-7"):
    settings = Settings.model_validate({"clusters": {CLUSTER: {"checkpoints": {"locations": [location],
                                                                                "max_age": "1h"}}}})
    return Doctor(settings=settings, connection=Connection(region=REGION), aws_factory=factory).check(
        CLUSTER, only=IDS)


def test_fsx_location_is_followed_to_its_s3_export(bucket):
    save(bucket, [(100, 200), (200, 130)], prefix="exported/run-7/")
    factory = _fsx_factory([_dra(), _dra(path="/", repo="s3://elsewhere/")])
    report = _run_fsx(factory)
    [finding] = report.findings
    assert finding.check == "checkpoint-stale" and finding.resource == f"fsx://{FS}/ckpt/run-7"
    assert finding.evidence["listed"] == f"s3://{BUCKET}/exported/run-7/"  # the longest covering path wins
    assert "exports to" in finding.evidence["via"] and report.errors == []
    [stub] = factory.stubs
    stub.assert_no_pending_responses()  # both FSx calls made, once each, for three checks


@pytest.mark.parametrize(
    "factory, reason",
    [
        (lambda: _fsx_factory([_dra(events=("DELETED",))]), "does not export new files"),
        (lambda: _fsx_factory([], legacy_export=f"s3://{BUCKET}/legacy"), "only when an export task runs"),
        (lambda: _fsx_factory([_dra(path="/other")]), "no data repository association"),
        (lambda: _fsx_factory([], file_system_type="OPENZFS"), "only a Lustre file system"),
    ],
    ids=["no-auto-export", "legacy-export-path", "path-not-covered", "not-lustre"],
)
def test_fsx_contents_that_cannot_be_read_are_said_so(bucket, factory, reason):
    report = _run_fsx(factory())
    assert report.findings == [] and report.status is Status.UNKNOWN  # no location readable: nothing verified
    assert {e.check for e in report.errors} == set(IDS)
    error = report.errors[0]
    assert error.code == "FsxContentsUnreadable" and reason in error.unverified
    assert "--local" in error.message


def test_moto_without_data_repository_associations_is_an_error_entry(bucket, aws, run_checks):
    subnet = next(iter(aws.client("ec2").describe_subnets()["Subnets"]))["SubnetId"]
    fs_id = aws.client("fsx").create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200,
                                                 SubnetIds=[subnet])["FileSystem"]["FileSystemId"]
    report = run_checks(["checkpoint-stale"], checkpoints={"locations": [f"fsx://{fs_id}/ckpt"]})
    [error] = report.errors
    assert error.code == "NotImplemented" and error.iam_action == "fsx:DescribeDataRepositoryAssociations"


# --- On the node: a real directory through LocalHost and GNU find ---------------------------------------

def test_local_path_on_the_node(tmp_path):
    """DeepSpeed ZeRO-3 on FSx mounted at /fsx: global_step300 died before rank 0 rewrote 'latest'
    (tests/fixtures/checkpoints/deepspeed-zero3-latest.txt)."""
    root = tmp_path / "fsx" / "ckpt"
    to_directory(root, layout("deepspeed-zero3-latest", 45))
    settings = Settings.model_validate({"checkpoints": {"locations": [str(root), "s3://elsewhere/x"],
                                                        "max_age": "1h"}})
    report = Doctor(settings=settings).check_local(only=IDS, host=LocalHost())
    assert {f.check for f in report.findings} == {"checkpoint-stale", "checkpoint-incomplete"}
    incomplete = report.findings_for("checkpoint-incomplete")[0]
    assert incomplete.resource == f"{root}/global_step300/"
    assert incomplete.evidence["resume_from"]["uri"] == f"{root}/global_step200/"
    assert "'latest' file was last rewritten" in incomplete.evidence["reasons"][0]
    [stale] = report.findings_for("checkpoint-stale")
    assert stale.evidence["usable"] == f"{root}/global_step200/"  # 75 minutes old: over the hour
    assert report.stats.api_calls == {} and report.errors == []
    missing = Doctor(settings=Settings.model_validate({"checkpoints": {"locations": [str(tmp_path / "nope")]}}))
    [finding] = missing.check_local(only=["checkpoint-missing"], host=LocalHost()).findings
    assert "does not exist on this node" in finding.summary


def test_local_listing_without_find_is_an_error_entry():
    from fmdoctor.engine.host import CommandResult

    class NoFind:
        name = "gpu-1"

        def run(self, argv, timeout=15.0):
            return CommandResult(tuple(argv), 127, missing=True)

        def read_text(self, path):
            return None

        def imds(self, path):
            return None

    settings = Settings.model_validate({"checkpoints": {"locations": ["/fsx/ckpt"]}})
    report = Doctor(settings=settings).check_local(only=["checkpoint-stale"], host=NoFind())
    assert [e.code for e in report.errors] == ["FindMissing"] and report.status is Status.UNKNOWN


def test_no_usable_checkpoint_says_whether_saves_died_or_one_is_still_being_written(bucket, run_checks):
    partial = {k: v for k, v in dcp_files(shards=4).items() if k != ".metadata"}
    save(bucket, [(100, 90), (200, 60)], files=partial)
    [finding] = run_checks(["checkpoint-stale"], checkpoints={"locations": [LOCATION], "max_age": "1h"}).findings
    assert "the newest 2 saves (step-000200, step-000100) are all incomplete" in finding.summary
    assert finding.evidence["save_under_way"] is False
    assert set(finding.evidence["incomplete"]) == {"step-000200", "step-000100"}


def test_a_first_save_with_no_proof_still_being_written_is_not_usable_yet(bucket, run_checks):
    """No marker proves it whole and it was written within the write grace: it may be under way."""
    save(bucket, [(100, 2)], files={"weights.bin": 10_000, "opt.bin": 5}, prefix="llm/run-7/")
    settings = {"locations": [LOCATION], "max_age": "1h", "write_grace": "15m"}
    report = run_checks(["checkpoint-stale", "checkpoint-incomplete"], checkpoints=settings)
    [finding] = report.findings
    assert finding.check == "checkpoint-stale" and finding.evidence["save_under_way"] is True
    assert "(step-000100) is still being written and none before it is whole" in finding.summary
    assert report.errors == []  # checkpoint-incomplete does not judge a save within its write grace


def test_a_location_of_several_runs_is_healthy_when_each_runs_newest_save_is(bucket, run_checks):
    """Found by review: an old save that died inside one run (tests/fixtures/checkpoints/nested-runs.txt) was a
    false critical on the whole run, and staleness was measured from another run."""
    to_s3(bucket, BUCKET, "runs/", layout("nested-runs", 20))
    report = run_checks(IDS, checkpoints={"locations": [f"s3://{BUCKET}/runs/"], "max_age": "1h"})
    assert report.findings == [] and report.errors == [] and report.status is Status.OK
