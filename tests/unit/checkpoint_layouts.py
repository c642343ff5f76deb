"""Checkpoint layouts from tests/fixtures/checkpoints (real frameworks' writers, see the README there), served
as a location: into moto S3, onto a real directory, or as in-memory listings for the pure scanner."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fmdoctor.checkpoints.model import StoredObject
from fmdoctor.demo.moto_health import backdate_s3_object

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"


def layout(name: str, newest_minutes_ago: float, now: datetime | None = None) -> list[StoredObject]:
    """The fixture's final listing (a rewritten file keeps its last write), dated so that its newest file was
    written ``newest_minutes_ago`` before ``now``. Keys are relative to the location."""
    lines = (FIXTURES / f"{name}.txt").read_text().splitlines()
    written: dict[str, StoredObject] = {}
    for line in lines:
        day, clock, size, key = line.split(maxsplit=3)
        when = datetime.fromisoformat(f"{day}T{clock}+00:00")
        written.pop(key, None)  # a rewrite moves the file to the end of the write order
        written[key] = StoredObject(key, int(size), when)
    newest = max(o.last_modified for o in written.values())
    shift = (now or datetime.now(UTC)) - timedelta(minutes=newest_minutes_ago) - newest
    return [StoredObject(o.key, o.size, o.last_modified + shift) for o in written.values()]


class ListingLister:
    """A location served from a listing, as S3 (or a directory bucket, ``shuffled``) would list it; records
    the listings it serves."""

    def __init__(self, objects: list[StoredObject], root: str = "s3://b/run/", shuffled: bool = False,
                 in_flight: tuple[str, ...] = ()):
        self.objects = objects
        self.root = root
        self.shuffled = shuffled
        self.in_flight = in_flight  # prefixes a directory bucket shows for multipart uploads still in flight
        self.calls: list[str] = []

    def _order(self, items: list) -> list:
        if self.shuffled:
            items = list(items)
            random.Random(7).shuffle(items)
            return items
        return sorted(items, key=lambda o: o.key if isinstance(o, StoredObject) else o)

    def level(self):
        self.calls.append("level")
        folders = sorted({o.key.split("/", 1)[0] for o in self.objects if "/" in o.key} | set(self.in_flight))
        return self._order(folders), self._order([o for o in self.objects if "/" not in o.key])

    def tree(self, folder):
        self.calls.append(f"tree:{folder}")
        return self._order([StoredObject(o.key[len(folder) + 1:], o.size, o.last_modified) for o in self.objects
                            if o.key.startswith(folder + "/")])

    def everything(self):
        self.calls.append("everything")
        return self._order(list(self.objects))


def to_s3(session, bucket: str, prefix: str, objects: list[StoredObject]) -> None:
    s3 = session.client("s3")
    for obj in objects:
        key = f"{prefix}{obj.key}"
        s3.put_object(Bucket=bucket, Key=key, Body=b"\0" * obj.size)
        backdate_s3_object(session, bucket, key, obj.last_modified)


def to_directory(root: Path, objects: list[StoredObject]) -> None:
    for obj in objects:
        path = root / obj.key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * obj.size)
        stamp = obj.last_modified.timestamp()
        os.utime(path, (stamp, stamp))
