"""The one safe file writer and the one bounded file reader, for files that cross a trust boundary.

:class:`SafeWriter` writes a new tree of files (``fmdoctor check --local --record DIR``, often run as root):

- the directory is created fresh (0700), or is an existing *empty* directory owned by the user that no one else
  may write to; anything else (a non-empty directory, one another user owns, one group- or world-writable, where
  another user could plant a subdirectory or replace a finished file, a symbolic link) is refused with one message;
- every subdirectory is created by the writer (0700) and opened with ``O_NOFOLLOW | O_DIRECTORY``, and must then be
  the user's and writable by no one else (one planted in its place is refused); every file
  with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (0600) relative to its directory's descriptor, so a link planted at any
  name makes the write fail instead of writing through it.

:class:`BoundedReader` reads files of such a tree back (``--replay DIR``, flight-recorder dumps): regular files
only (a FIFO, a device or a directory is refused without blocking: ``O_NONBLOCK``), each at most ``per_file``
bytes and all together at most ``total`` (checked from ``fstat`` before reading, and again while reading), and
every refusal is a :class:`FileRefused` naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path


class FileRefused(OSError):
    """A file or directory the safe writer or bounded reader will not use; the message names it and why."""


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _not_private(info: os.stat_result) -> str | None:
    """Why a directory is not one only this user can change, or None."""
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by you"
    if info.st_mode & _OTHERS_WRITE:
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


class SafeWriter:
    """Writes files under ``root``, which it creates or checks first (see the module's docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self._fd = self._open_root(root)

    @staticmethod
    def _open_root(root: Path) -> int:
        root.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            info = os.lstat(root)
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                raise FileRefused(f"{root}: exists and is {_kind(info.st_mode)}; give a new directory") from None
            if info.st_uid != os.geteuid():
                raise FileRefused(f"{root}: owned by uid {info.st_uid}, not by you; give a new directory") from None
            if info.st_mode & _OTHERS_WRITE:
                raise FileRefused(f"{root}: writable by others (mode {stat.S_IMODE(info.st_mode):o}); give a new "
                                  "directory") from None
            if os.listdir(root):
                raise FileRefused(f"{root}: not empty; give a new or empty directory") from None
        fd = os.open(root, _DIR_FLAGS)
        why = _not_private(os.fstat(fd))  # swapped between the checks and the open
        if why:
            os.close(fd)
            raise FileRefused(f"{root}: {why}; give a new directory")
        return fd

    def _directory(self, parts: list[str]) -> int:
        fd = os.dup(self._fd)
        for part in parts:
            with contextlib.suppress(FileExistsError):  # made by this writer for an earlier file
                os.mkdir(part, 0o700, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                os.close(fd)
                raise FileRefused(f"{self.root / '/'.join(parts)}: not a directory this writer made ({exc.strerror})"
                                  ) from None
            os.close(fd)
            fd = child
            why = _not_private(os.fstat(fd))  # another user's directory planted at the name before the mkdir
            if why:
                os.close(fd)
                raise FileRefused(f"{self.root / '/'.join(parts)}: not a directory this writer made ({why})")
        return fd

    def write_text(self, relative: str, text: str) -> Path:
        """Create ``root/relative`` (0600), refusing one that exists, a link included."""
        *parents, name = [p for p in relative.split("/") if p]
        if not name or any(p in (".", "..") for p in (*parents, name)):
            raise FileRefused(f"{relative!r}: not a plain relative path")
        directory = self._directory(parents)
        try:
            try:
                fd = os.open(name, _WRITE_FLAGS, 0o600, dir_fd=directory)
            except OSError as exc:
                raise FileRefused(f"{self.root / relative}: not created ({exc.strerror}; something is already there)"
                                  ) from None
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        finally:
            os.close(directory)
        return self.root / relative

    def close(self) -> None:
        os.close(self._fd)


class BoundedReader:
    """Reads regular files, each at most ``per_file`` bytes and ``total`` bytes altogether."""

    def __init__(self, per_file: int, total: int):
        self.per_file, self.total, self.used = per_file, total, 0

    def read_bytes(self, path: Path) -> bytes:
        try:
            fd = os.open(path, _READ_FLAGS)
        except OSError as exc:
            why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror  # O_NOFOLLOW met a link
            raise FileRefused(f"{path}: not read ({why})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FileRefused(f"{path}: {_kind(info.st_mode)}, not a regular file")
            self._admit(path, info.st_size)
            chunks, size = [], 0
            while True:
                chunk = os.read(fd, min(1 << 20, self.per_file + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > self.per_file:  # grew while being read
                    raise FileRefused(f"{path}: over {self.per_file} bytes")
        finally:
            os.close(fd)
        self.used += size - info.st_size
        return b"".join(chunks)

    def read_text(self, path: Path) -> str:
        data = self.read_bytes(path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FileRefused(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None

    def admit(self, what: str, size: int) -> None:
        """Count ``size`` bytes of ``what`` (read elsewhere, e.g. an S3 object whose listing gave its size)."""
        self._admit(what, size)

    def _admit(self, what: object, size: int) -> None:
        if size > self.per_file:
            raise FileRefused(f"{what}: {size} bytes, over the {self.per_file}-byte limit for one file")
        if self.used + size > self.total:
            raise FileRefused(f"{what}: {size} more bytes would pass the {self.total}-byte limit for all files")
        self.used += size
