"""Issue 35 item 10: the demo's loopback Prometheus (Debian's ``prometheus``) lives and dies with fmdoctor. The
installed CLI runs ``serve --demo`` (a demo command that stays up) as a child; a signal is sent once its Prometheus
is up, and the test looks for the server process and its temporary directory afterwards."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus package needed")]


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def prometheus_of(pid: int) -> tuple[int, Path] | None:
    for child in children(pid):
        try:
            argv = (Path("/proc") / str(child) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"prometheus"):
            data = next(a for a in argv if a.startswith(b"--storage.tsdb.path="))
            return child, Path(data.split(b"=", 1)[1].decode()).parent
    return None


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    """``fmdoctor serve --demo`` without a queue: it stays up until signalled, with the demo's Prometheus."""
    script = Path(sys.executable).with_name("fmdoctor")
    env = {**os.environ, "FMDOCTOR_SERVE_TOKEN": ""}
    proc = subprocess.Popen([str(script), "serve", "--demo", "--port", "0"], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "serve.log").open("w"), start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = prometheus_of(proc.pid)
        if found and "fmdoctor serve: queue" in (tmp_path / "serve.log").read_text():
            return proc, *found
        if proc.poll() is not None:
            raise AssertionError((tmp_path / "serve.log").read_text())
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("the demo's Prometheus did not start")


def gone(pid: int, workdir: Path | None, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid) and (workdir is None or not workdir.exists()):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_the_demo_prometheus_does_not_outlive_fmdoctor(tmp_path, sig):
    proc, server, workdir = start(tmp_path)
    try:
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
        # SIGTERM (kill) and SIGHUP (a closed terminal) unwind the demo; SIGKILL leaves the directory, not the server.
        assert gone(server, workdir if sig != signal.SIGKILL else None)
    finally:
        if alive(server):
            os.kill(server, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)
        if proc.poll() is None:
            proc.kill()
