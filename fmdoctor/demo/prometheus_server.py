"""A real Prometheus on 127.0.0.1, loaded with history: for the demo and the tests.

Debian's ``prometheus`` package provides the server and ``promtool``. The history is OpenMetrics text
(:mod:`fmdoctor.demo.openmetrics`) turned into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics``
(Prometheus's documented backfilling), in a temporary data directory the server is started on and which is
removed afterwards. Nothing is scraped: the server only answers queries over what was loaded.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

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


@contextlib.contextmanager
def loopback_prometheus(openmetrics: str) -> Iterator[str]:
    """Start Prometheus over ``openmetrics`` history; yields its base URL (``http://127.0.0.1:PORT/``)."""
    found = binaries()
    if found is None:
        raise FileNotFoundError(f"prometheus and promtool are not on PATH: {INSTALL_HINT}")
    server, tool = found
    workdir = Path(tempfile.mkdtemp(prefix="fmdoctor-prometheus-"))
    process: subprocess.Popen[bytes] | None = None
    log = None
    try:
        (workdir / "history.om").write_text(openmetrics, encoding="utf-8")
        (workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n", encoding="utf-8")
        subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", str(workdir / "history.om"),
                        str(workdir / "data")], check=True, capture_output=True, timeout=120)
        port = _free_port()
        log = (workdir / "prometheus.log").open("wb")
        process = subprocess.Popen(
            [server, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}/"
        _wait_ready(url, process, workdir / "prometheus.log")
        yield url
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if log is not None:
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
