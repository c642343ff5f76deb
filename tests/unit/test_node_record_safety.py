"""Issue 35 items 7 and 8: ``check --local --record DIR`` never writes through a planted link, and ``--replay DIR``
reads regular files of bounded size only. Through the CLI, on the demo node's recording (real tool output)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fmdoctor.cli.check_cmd import demo_recording
from fmdoctor.cli.main import main
from fmdoctor.engine.safe_files import BoundedReader, FileRefused, SafeWriter


def record(capsys, directory: Path) -> tuple[int, str]:
    code = main(["check", "--local", "--demo", "--record", str(directory), "--format", "json"])
    return code, capsys.readouterr().err


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "etc-shadow"
    path.write_text("root:$6$untouched\n")
    return path


@pytest.mark.parametrize("planted", ["manifest.json", "commands/01-fi_info.stdout"])
def test_record_never_writes_through_a_link_someone_planted(capsys, tmp_path, victim, planted):
    trap = tmp_path / "shared" / "rec"
    (trap / "commands").mkdir(parents=True)
    (trap / planted).symlink_to(victim)
    code, err = record(capsys, trap)
    assert victim.read_text() == "root:$6$untouched\n"
    assert code != 0 and f"{trap}: not empty" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")
def test_record_refuses_a_directory_another_user_owns(capsys, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chown(theirs, 12345, 12345)
    code, err = record(capsys, theirs)
    assert code != 0 and "owned by uid 12345, not by you" in err and os.listdir(theirs) == []


def test_record_refuses_an_empty_directory_others_may_write(capsys, tmp_path, victim):
    """Adversarial review: an empty 0777 directory of one's own was taken, and anyone could then plant a
    ``files/`` directory of theirs (or replace ``manifest.json`` once written): the recording was theirs to edit."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    code, err = record(capsys, shared)
    assert code != 0 and "writable by others (mode 777)" in err and os.listdir(shared) == []


def test_the_writer_refuses_a_subdirectory_planted_before_it_made_one(tmp_path):
    writer = SafeWriter(tmp_path / "rec")
    planted = tmp_path / "rec" / "commands"
    planted.mkdir()
    planted.chmod(0o777)  # as another user would leave it (and as root, owned by them: see below)
    if os.geteuid() == 0:
        os.chown(planted, 12345, 12345)
    with pytest.raises(FileRefused, match="not a directory this writer made"):
        writer.write_text("commands/01-fi_info.stdout", "x")
    writer.close()
    assert os.listdir(planted) == []


def test_record_refuses_a_link_as_the_directory(capsys, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    code, err = record(capsys, tmp_path / "link")
    assert code != 0 and "a symbolic link" in err and os.listdir(tmp_path / "real") == []


def test_record_makes_a_private_fresh_directory_that_replays(capsys, tmp_path):
    fresh = tmp_path / "new" / "rec"
    code, _ = record(capsys, fresh)
    assert code in (0, 1, 2)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700 and stat.S_IMODE((fresh / "commands").stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in fresh.rglob("*") if p.is_file()} == {0o600}
    assert main(["check", "--local", "--replay", str(fresh), "--format", "json"]) == code
    empty = tmp_path / "empty"
    empty.mkdir()
    assert record(capsys, empty)[0] == code  # an empty directory of one's own is fine


def test_the_writer_refuses_links_planted_after_it_started(tmp_path, victim):
    writer = SafeWriter(tmp_path / "rec")
    (tmp_path / "rec" / "manifest.json").symlink_to(victim)
    (tmp_path / "rec" / "commands").symlink_to(tmp_path)
    for name in ("manifest.json", "commands/01-fi_info.stdout"):
        with pytest.raises(FileRefused, match="not"):
            writer.write_text(name, "x")
    writer.close()
    assert victim.read_text() == "root:$6$untouched\n" and not (tmp_path / "01-fi_info.stdout").exists()


def replay(directory: Path) -> subprocess.CompletedProcess[str]:
    """In a child process: a replay that blocks on a FIFO must fail the test, not hang it."""
    script = Path(sys.executable).with_name("fmdoctor")
    return subprocess.run([str(script), "check", "--local", "--replay", str(directory), "--format", "json"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.fixture
def copy(tmp_path) -> Path:
    target = tmp_path / "recording"
    shutil.copytree(demo_recording(), target)
    return target


def test_replay_refuses_a_fifo_naming_it(copy):
    fifo = copy / "commands" / "03-nvidia-smi.stdout"
    fifo.unlink()
    os.mkfifo(fifo)
    done = replay(copy)
    assert done.returncode == 3 and f"{fifo}: a FIFO, not a regular file" in done.stderr


def test_replay_refuses_a_huge_sparse_file_before_reading_it(copy):
    sparse = copy / "commands" / "02-journalctl.stdout"
    with sparse.open("r+b") as handle:
        handle.truncate(256 * 1024 * 1024)
    done = replay(copy)
    assert done.returncode == 3 and f"{sparse}: 268435456 bytes, over the" in done.stderr


def test_replay_refuses_a_linked_file(copy, victim):
    linked = copy / "commands" / "01-fi_info.stdout"
    linked.unlink()
    linked.symlink_to(copy / "commands" / "03-nvidia-smi.stdout")
    done = replay(copy)
    assert done.returncode == 3 and f"{linked}: not read (a symbolic link)" in done.stderr


def test_the_reader_bounds_the_total(tmp_path):
    for name in "abc":
        (tmp_path / name).write_bytes(b"x" * 400)
    reader = BoundedReader(per_file=500, total=1000)
    reader.read_bytes(tmp_path / "a")
    reader.read_bytes(tmp_path / "b")
    with pytest.raises(FileRefused, match=f"{tmp_path / 'c'}: 400 more bytes would pass the 1000-byte limit"):
        reader.read_bytes(tmp_path / "c")
