"""S3 checkpoint locations, listed with ListObjectsV2 and Delimiter='/'.

The top level of a run's prefix holds one common prefix per checkpoint, so one paginated delimiter listing
(1,000 checkpoints a page) finds the newest step; only the newest two checkpoints are then listed in full.
Listing every object of a prefix that holds hundreds of multi-file checkpoints would take pages by the
hundred. Needs only s3:ListBucket.
"""

from __future__ import annotations

from typing import Any

from fmdoctor.checkpoints.model import StoredObject

PAGE_SIZE = 1000  # ListObjectsV2's maximum


def split_s3_uri(uri: str) -> tuple[str, str]:
    """'s3://bucket/a/b' -> ('bucket', 'a/b/'): a location is a folder, so its prefix ends in '/'."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    prefix = prefix.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


class S3Lister:
    def __init__(self, s3: Any, uri: str):
        self.s3 = s3
        self.bucket, self.prefix = split_s3_uri(uri)
        self.root = f"s3://{self.bucket}/{self.prefix}"

    def level(self) -> tuple[list[str], list[StoredObject]]:
        folders: list[str] = []
        files: list[StoredObject] = []
        for page in self._pages(self.prefix, delimiter=True):
            folders += [p["Prefix"][len(self.prefix):].rstrip("/") for p in page.get("CommonPrefixes", [])]
            files += self._objects(page, self.prefix)
        return folders, files

    def tree(self, folder: str) -> list[StoredObject]:
        prefix = f"{self.prefix}{folder}/"
        return [obj for page in self._pages(prefix, delimiter=False) for obj in self._objects(page, prefix)]

    def everything(self) -> list[StoredObject]:
        return [obj for page in self._pages(self.prefix, delimiter=False) for obj in self._objects(page, self.prefix)]

    def _pages(self, prefix: str, delimiter: bool) -> Any:
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "PaginationConfig": {"PageSize": PAGE_SIZE}}
        if delimiter:
            kwargs["Delimiter"] = "/"
        return self.s3.get_paginator("list_objects_v2").paginate(**kwargs)

    @staticmethod
    def _objects(page: dict[str, Any], prefix: str) -> list[StoredObject]:
        # Keys ending in '/' are zero-byte "folder" markers made by consoles and some tools, not files.
        return [
            StoredObject(raw["Key"][len(prefix):], int(raw.get("Size", 0)), raw["LastModified"])
            for raw in page.get("Contents", [])
            if not raw["Key"].endswith("/")
        ]
