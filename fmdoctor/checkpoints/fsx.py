"""FSx for Lustre checkpoint locations, followed to the S3 bucket they export to.

The FSx API cannot list files. A Lustre file system's contents are visible from the API side only through
a data repository association (DRA) that exports new and changed files to S3 automatically; then the
location is read as that S3 prefix. Without one (no association for the path, an association without
automatic export, or a legacy ExportPath that only a manual export task updates) the contents cannot be
verified from here, and the caller is told so: run ``fmdoctor check --local`` on a node that mounts it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from fmdoctor.engine.gaps import Gaps

DRA_PAGE_SIZE = 25  # DescribeDataRepositoryAssociations' maximum


@dataclass(frozen=True)
class FsxTarget:
    location: str
    file_system_id: str
    path: str  # inside the file system, '/' for its root
    s3_uri: str | None = None  # where its checkpoints can be listed
    via: str | None = None
    unreadable: str | None = None  # why the contents cannot be read through the API


def parse_fsx_location(location: str) -> tuple[str, str]:
    """'fsx://fs-0abc/ckpt/run-42' -> ('fs-0abc', '/ckpt/run-42'); a bare 'fs-0abc' is its root."""
    fs_id, _, path = location.removeprefix("fsx://").partition("/")
    return fs_id, posixpath.normpath("/" + path)


def resolve_fsx(fsx: Any, locations: Sequence[str], gaps: Gaps) -> list[FsxTarget]:
    """One DescribeFileSystems for all ids, one (paginated) DescribeDataRepositoryAssociations for Lustre ones."""
    parsed = [(loc, *parse_fsx_location(loc)) for loc in locations]
    ids = sorted({fs_id for _, fs_id, _ in parsed})
    systems: dict[str, dict[str, Any]] | None = None
    with gaps.guard(f"FSx file systems {', '.join(ids)} (checkpoint locations)"):
        systems = _describe_file_systems(fsx, ids)
    if systems is None:
        return []
    lustre = [i for i in ids if systems.get(i, {}).get("FileSystemType") == "LUSTRE"]
    associations: dict[str, list[dict[str, Any]]] | None = None
    if lustre:
        with gaps.guard(f"data repository associations of {', '.join(lustre)}, so their checkpoints"):
            associations = _associations(fsx, lustre)
    targets = []
    for location, fs_id, path in parsed:
        if fs_id in lustre and associations is None:
            continue  # the gap above already says what could not be verified
        targets.append(_target(location, fs_id, path, systems.get(fs_id), (associations or {}).get(fs_id, [])))
    return targets


def _describe_file_systems(fsx: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    try:
        pages = fsx.get_paginator("describe_file_systems").paginate(FileSystemIds=ids)
        return {fs["FileSystemId"]: fs for page in pages for fs in page.get("FileSystems", [])}
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "FileSystemNotFound":
            raise
    if len(ids) == 1:
        return {}
    # One unknown id fails the whole batch (rare: a typo in the config); ask for each to find which exist.
    found: dict[str, dict[str, Any]] = {}
    for fs_id in ids:
        found.update(_describe_file_systems(fsx, [fs_id]))
    return found


def _associations(fsx: Any, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    by_fs: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    token: str | None = None
    while True:  # botocore has no paginator for this operation
        kwargs: dict[str, Any] = {"Filters": [{"Name": "file-system-id", "Values": ids}], "MaxResults": DRA_PAGE_SIZE}
        if token:
            kwargs["NextToken"] = token
        page = fsx.describe_data_repository_associations(**kwargs)
        for dra in page.get("Associations", []):
            by_fs.setdefault(dra.get("FileSystemId", ""), []).append(dra)
        token = page.get("NextToken")
        if not token:
            return by_fs


def _target(location: str, fs_id: str, path: str, system: dict[str, Any] | None,
            associations: list[dict[str, Any]]) -> FsxTarget:
    def unreadable(reason: str) -> FsxTarget:
        return FsxTarget(location, fs_id, path, unreadable=reason)

    if system is None:
        return unreadable(f"file system {fs_id} does not exist in this account and region")
    kind = system.get("FileSystemType", "?")
    if kind != "LUSTRE":
        return unreadable(f"{fs_id} is FSx for {kind}; only a Lustre file system's export to S3 can be followed")
    match = _covering(associations, path)
    if match is None:
        legacy = ((system.get("LustreConfiguration") or {}).get("DataRepositoryConfiguration") or {})
        if legacy.get("ExportPath"):
            return unreadable(f"{fs_id} exports to {legacy['ExportPath']} only when an export task runs, so S3 "
                              "does not show its latest checkpoints")
        return unreadable(f"no data repository association of {fs_id} covers {path}")
    dra_id = match.get("AssociationId", "?")
    if match.get("Lifecycle", "AVAILABLE") != "AVAILABLE":
        return unreadable(f"data repository association {dra_id} of {fs_id} is {match.get('Lifecycle')}")
    events = (((match.get("S3") or {}).get("AutoExportPolicy") or {}).get("Events")) or []
    if "NEW" not in events:
        return unreadable(f"data repository association {dra_id} does not export new files to "
                          f"{match.get('DataRepositoryPath')} automatically")
    mount = posixpath.normpath(match.get("FileSystemPath") or "/")
    rest = posixpath.relpath(path, mount) if path != mount else ""
    base = match["DataRepositoryPath"].rstrip("/")
    s3_uri = f"{base}/{rest}/" if rest and rest != "." else f"{base}/"
    via = f"{fs_id}:{mount} exports to {base}/ (association {dra_id}, events {','.join(events)})"
    return FsxTarget(location, fs_id, path, s3_uri=s3_uri, via=via)


def _covering(associations: list[dict[str, Any]], path: str) -> dict[str, Any] | None:
    """The association whose file-system path is the longest prefix of ``path`` (whole components only)."""
    best, best_len = None, -1
    for dra in associations:
        mount = posixpath.normpath(dra.get("FileSystemPath") or "/")
        if dra.get("DataRepositoryPath", "").startswith("s3://") and (
            mount == "/" or path == mount or path.startswith(mount + "/")
        ) and len(mount) > best_len:
            best, best_len = dra, len(mount)
    return best
