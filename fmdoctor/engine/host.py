"""The node fmdoctor runs on, for ``fmdoctor check --local``: commands, files and the instance metadata service.

Node checks only ever touch the host through this interface, so tests replay recorded ``nvidia-smi``,
``dmesg``, sysfs and IMDS output through a fake host instead of needing a GPU node, and
``fmdoctor check --local --record DIR`` can capture everything a node answered.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.error
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from fmdoctor.engine import outbound

IMDS_DEFAULT_ENDPOINT = "http://169.254.169.254"
IMDS_MAX_BYTES = 1024 * 1024  # IMDS answers a few KB (user data, the largest, is at most 16 KB)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str = ""
    stderr: str = ""
    missing: bool = False  # the binary is not installed
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.missing and not self.timed_out


class Host(Protocol):
    name: str

    def run(self, argv: Sequence[str], timeout: float = 15.0) -> CommandResult: ...

    def read_text(self, path: str) -> str | None: ...

    def list_dir(self, path: str) -> list[str] | None:
        """Names in a directory (sorted); None when it does not exist or cannot be read."""
        ...

    def imds(self, path: str) -> str | None:
        """GET an IMDSv2 path (e.g. 'latest/meta-data/spot/instance-action'); None when absent (404)."""
        ...


class LocalHost:
    """The real machine. Missing binaries and timeouts are results, not exceptions."""

    def __init__(self, imds_endpoint: str | None = None, imds_timeout: float = 2.0):
        self.name = socket.gethostname()
        self.imds_endpoint = (imds_endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
                              or IMDS_DEFAULT_ENDPOINT).rstrip("/")
        self.imds_timeout = imds_timeout
        self._token: str | None = None

    def run(self, argv: Sequence[str], timeout: float = 15.0) -> CommandResult:
        argv = tuple(argv)
        if shutil.which(argv[0]) is None:
            return CommandResult(argv, 127, missing=True, stderr=f"{argv[0]}: not found")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            return CommandResult(argv, 124, str(exc.stdout or ""), f"timed out after {timeout}s", timed_out=True)
        except OSError as exc:
            return CommandResult(argv, 126, stderr=str(exc))
        return CommandResult(argv, done.returncode, done.stdout, done.stderr)

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def imds(self, path: str) -> str | None:
        token = self._imds_token()
        request = outbound.request(f"{self.imds_endpoint}/{path.lstrip('/')}")
        if token:
            request.add_header("X-aws-ec2-metadata-token", token)
        try:
            with outbound.urlopen(request, timeout=self.imds_timeout) as response:
                body = outbound.read_body(response, IMDS_MAX_BYTES, f"IMDS {path}")
                return body.decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise ImdsUnavailable(f"IMDS answered {exc.code} for {path}") from exc
        except (urllib.error.URLError, OSError, outbound.ResponseTooLarge) as exc:
            raise ImdsUnavailable(f"IMDS not reachable at {self.imds_endpoint}: {exc}") from exc

    def _imds_token(self) -> str | None:
        if self._token is None:
            request = outbound.request(f"{self.imds_endpoint}/latest/api/token", method="PUT",
                                       headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"})
            try:
                with outbound.urlopen(request, timeout=self.imds_timeout) as response:
                    self._token = outbound.read_body(response, IMDS_MAX_BYTES, "IMDS token").decode()
            except (urllib.error.URLError, OSError, outbound.ResponseTooLarge) as exc:
                raise ImdsUnavailable(f"IMDSv2 token request to {self.imds_endpoint} failed: {exc}") from exc
        return self._token


class ImdsUnavailable(Exception):
    """Not on EC2, IMDS disabled, or hop limit too low for a container."""
