"""A real Prometheus on 127.0.0.1, loaded with history: for the demo and the tests.

Debian's ``prometheus`` package provides the server and ``promtool``. The history is OpenMetrics text
(:mod:`fmdoctor.demo.openmetrics`) turned into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics``
(Prometheus's documented backfilling), in a temporary data directory the server is started on and which is
removed afterwards. Nothing is scraped: the server only answers queries over what was loaded.

Its life is tied to fmdoctor's: it runs in a process group of its own (a terminal's SIGINT or SIGHUP, which
Prometheus takes as "reload", does not reach it; it is stopped as a group), with a parent-death signal
(``PR_SET_PDEATHSIG``, Linux's prctl, through ctypes) so that it is terminated when fmdoctor dies however it
dies, and while it runs a SIGTERM or SIGHUP to fmdoctor (``kill``, a closed terminal) unwinds the demo as
Ctrl-C does: the server is stopped and its temporary directory removed. Only a SIGKILL leaves that directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BACKFILL_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 60.0  # a loaded machine (CI with every core busy) opens the blocks slowly
INSTALL_HINT = "install Debian's prometheus package (apt-get install prometheus) to run it"


def binaries() -> tuple[str, str] | None:
    """(prometheus, promtool) when both are on PATH."""
    server, tool = shutil.which("prometheus"), shutil.which("promtool")
    return (server, tool) if server and tool else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks the kernel to SIGTERM the child when this process dies (Linux); libc is looked
    up here, before the fork, so the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Any = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def tie() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was set
            os.kill(os.getpid(), signal.SIGKILL)

    return tie


@contextlib.contextmanager
def _unwind_on_signals() -> Iterator[None]:
    """While the server runs, SIGTERM and SIGHUP to fmdoctor unwind the demo (SystemExit) instead of killing the
    process on the spot; a handler someone else installed (``serve``'s graceful SIGTERM) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    installed = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            installed[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, previous in installed.items():
            if signal.getsignal(sig) is stop:
                signal.signal(sig, previous)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate the server's whole process group, then wait (kill if it does not go)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def loopback_prometheus(openmetrics: str) -> Iterator[str]:
    """Start Prometheus over ``openmetrics`` history; yields its base URL (``http://127.0.0.1:PORT/``)."""
    with starting_prometheus(openmetrics) as ready:
        yield ready()


@contextlib.contextmanager
def starting_prometheus(openmetrics: str) -> Iterator[Callable[[], str]]:
    """Start loading ``openmetrics`` into a loopback Prometheus and go on: ``promtool``'s backfill (a third of a
    second and more, on another core) runs while the caller works. Yields a callable that waits for the server to
    answer and returns its base URL (raising as :func:`loopback_prometheus` does when it cannot start); the server
    and its directory go on exit. The parent-death signal is tied to the thread that starts the children, so start
    it on a thread that lives as long as the server is needed (as the demo's seeding thread does)."""
    found = binaries()
    if found is None:
        raise FileNotFoundError(f"prometheus and promtool are not on PATH: {INSTALL_HINT}")
    server, tool = found
    tie = _parent_death_signal()
    with _unwind_on_signals():
        workdir = Path(tempfile.mkdtemp(prefix="fmdoctor-prometheus-"))
        backfill: subprocess.Popen[bytes] | None = None
        process: subprocess.Popen[bytes] | None = None
        logs: list[Any] = []
        try:
            (workdir / "history.om").write_text(openmetrics, encoding="utf-8")
            (workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n", encoding="utf-8")
            # Its output goes to a file, not a pipe nobody reads until it ends (a full pipe would stall it).
            logs.append(backfill_log := (workdir / "promtool.log").open("wb"))
            backfill = subprocess.Popen(
                [tool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "history.om"), str(workdir / "data")],
                stdout=backfill_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=tie)  # noqa: PLW1509 (only prctl, resolved before the fork)
            url = ""

            def ready() -> str:
                nonlocal process, url
                if url:
                    return url
                assert backfill is not None
                try:
                    backfill.wait(timeout=BACKFILL_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    backfill.kill()
                    raise
                if backfill.returncode:
                    raise subprocess.CalledProcessError(backfill.returncode, backfill.args,
                                                        (workdir / "promtool.log").read_bytes()[-600:])
                port = _free_port()
                logs.append(log := (workdir / "prometheus.log").open("wb"))
                process = subprocess.Popen(
                    [server, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0,
                    preexec_fn=tie,  # noqa: PLW1509
                )
                try:
                    _wait_ready(f"http://127.0.0.1:{port}/", process, workdir / "prometheus.log")
                except BaseException:  # the caller goes on without it: stopped now, not when the context ends
                    _stop(process)
                    process = None
                    raise
                url = f"http://127.0.0.1:{port}/"
                return url

            yield ready
        finally:
            if backfill is not None and backfill.poll() is None:
                backfill.kill()
                backfill.wait()
            if process is not None:
                _stop(process)
            for log in logs:
                log.close()
            shutil.rmtree(workdir, ignore_errors=True)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited ({process.returncode}): {log.read_text()[-600:]}")
        try:
            with urllib.request.urlopen(url + "-/ready", timeout=1) as reply:  # noqa: S310 (loopback)
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"prometheus did not become ready in {READY_TIMEOUT_S:g}s: {log.read_text()[-600:]}")
