"""Local checkpoint directories (a node's disk, or FSx for Lustre mounted at /fsx), read on the node itself.

Listed through the injected :class:`~fmdoctor.engine.host.Host` with GNU ``find -printf``, NUL-separated so
any file name parses, and with the same shape as an S3 location: one listing of the top level, then the
newest two checkpoint folders in full. Symbolic links at the top level are kept with their target: Lightning's
``save_last="link"`` and NeMo's make ``last.ckpt`` / ``<name>-last`` links to the newest save.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fmdoctor.checkpoints.model import StoredObject
from fmdoctor.engine.gaps import SourceError
from fmdoctor.engine.host import Host

# type (d, f, l...), bytes, mtime (epoch seconds), path relative to the start; then a link's target (empty for
# anything else) as a second NUL-terminated field, so neither may contain a separator that breaks the parse.
_FORMAT = r"%y\t%s\t%T@\t%P\0%l\0"


class PathMissing(SourceError):
    def __init__(self, path: str):
        super().__init__("PathNotFound", f"{path} does not exist on this node")


class LocalLister:
    def __init__(self, host: Host, path: str):
        self.host = host
        self.path = path.removeprefix("file://").rstrip("/") or "/"
        self.root = self.path.rstrip("/") + "/"

    def level(self) -> tuple[list[str], list[StoredObject]]:
        entries = self._find(self.root, "-mindepth", "1", "-maxdepth", "1")
        folders = [name for kind, _, name in entries if kind == "d"]
        files = [obj for kind, obj, _ in entries if kind in ("f", "l") and obj is not None]
        return folders, files

    def tree(self, folder: str) -> list[StoredObject]:
        return [obj for kind, obj, _ in self._find(f"{self.root}{folder}/", "-type", "f") if obj is not None]

    def everything(self) -> list[StoredObject]:
        return [obj for kind, obj, _ in self._find(self.root, "-type", "f") if obj is not None]

    def _find(self, start: str, *tests: str) -> list[tuple[str, StoredObject | None, str]]:
        result = self.host.run(["find", start, *tests, "-printf", _FORMAT], timeout=60)
        if result.missing:
            raise SourceError("FindMissing", "the 'find' command is not installed on this node")
        if result.timed_out:
            raise SourceError("Timeout", f"listing {start} took longer than 60s")
        if not result.ok:
            stderr = result.stderr.strip()
            if "No such file or directory" in stderr and not result.stdout:
                raise PathMissing(start.rstrip("/"))
            raise SourceError("ListingFailed", f"find {start} exited {result.returncode}: {stderr[:300]}")
        fields = result.stdout.split("\0")
        pairs = zip(fields[0::2], fields[1::2], strict=False)
        return [parsed for record, target in pairs if record and (parsed := _parse(record, target))]


def _parse(record: str, target: str) -> tuple[str, StoredObject | None, str] | None:
    parts = record.lstrip("\n").split("\t", 3)
    if len(parts) != 4:
        return None
    kind, size, mtime, name = parts
    try:
        when = datetime.fromtimestamp(float(mtime), UTC)
        if kind == "f":
            obj: StoredObject | None = StoredObject(name, int(size), when)
        elif kind == "l":
            obj = StoredObject(name, int(size), when, link_target=target)
        else:
            obj = None
    except ValueError:
        return None
    return kind, obj, name
