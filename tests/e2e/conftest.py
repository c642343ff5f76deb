"""End-to-end fixtures: a real moto server on 127.0.0.1 and the installed ``fmdoctor`` CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

REGION = "us-west-2"


@dataclass
class MotoServer:
    url: str

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=10).read()

    def session(self) -> boto3.Session:
        return boto3.Session(region_name=REGION)


@pytest.fixture(scope="session")
def _moto_server() -> Iterator[MotoServer]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield MotoServer(f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def moto_server(_moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch) -> MotoServer:
    """A clean server per test; this process's boto3 (the seeders) talks to it through AWS_ENDPOINT_URL."""
    _moto_server.reset()
    monkeypatch.setenv("AWS_ENDPOINT_URL", _moto_server.url)
    return _moto_server


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def fmdoctor_cli(tmp_path: Path):
    """Run the installed console script with a clean environment (fake keys, no profile, no real AWS)."""
    script = Path(sys.executable).with_name("fmdoctor")
    assert script.exists(), "fmdoctor must be installed (pip install -e '.[test]')"

    def run(*argv: str, env: dict[str, str] | None = None, timeout: float = 120, input: str | None = None) -> CliResult:
        base = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            "NO_PROXY": "127.0.0.1,localhost",
        }
        base.update(env or {})
        # stdin is never the developer's terminal: a command that would prompt sees no TTY, as in CI.
        stdin = subprocess.DEVNULL if input is None else None
        done = subprocess.run([str(script), *argv], capture_output=True, text=True, env=base, timeout=timeout,
                              cwd=tmp_path, stdin=stdin, input=input)
        return CliResult(done.returncode, done.stdout, done.stderr)

    return run
