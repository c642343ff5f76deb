"""Objects handed to moto's S3 backend as moto's PutObject handler stores them, for worlds moto keeps in this process.

The demo writes 44 small objects (checkpoint shards); each PutObject through a client costs about 5 ms of botocore
signing and streaming a body with its checksum trailer, then moto parsing it back, while the backend's own work is
a tenth of that. :func:`put_object` makes the handler's calls for a plain PutObject (no ACL, tagging, lock or
encryption headers; a bucket without object lock) with what a botocore client sends for one: its default checksum
(CRC32, computed by moto's routine as moto does for a trailer) and the one header moto keeps as metadata.
tests/unit/test_demo_seeding.py compares every stored field and the S3 APIs' answers with the request route, so a
moto or botocore that stores or sends something else fails there.
"""

from __future__ import annotations

from typing import Any

# What moto's handler stores from a botocore PutObject's headers (moto.s3.utils.metadata_from_headers keeps this
# signing header with the user-settable ones): the body is streamed with its checksum as a trailer.
_REQUEST_METADATA = {"x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}


def backend_answering(session: Any) -> Any:
    """moto's S3 backend for ``session``'s account (S3's is one per partition, not per region)."""
    from moto.backends import get_backend

    account = session.client("sts").get_caller_identity()["Account"]
    return get_backend("s3")[account]["aws"]


def put_object(backend: Any, bucket: str, key: str, body: bytes) -> Any:
    """PutObject of ``body`` at ``key``, as moto's ``S3Response.put_object`` handles a botocore client's request
    carrying no optional header; returns moto's key."""
    from botocore.httpchecksum import DEFAULT_CHECKSUM_ALGORITHM
    from moto.s3.utils import compute_checksum, metadata_from_headers

    stored_bucket = backend.get_bucket(bucket)
    if stored_bucket.object_lock_enabled:
        raise ValueError(f"bucket {bucket} has object lock: PutObject needs headers this route does not send")
    checksum = compute_checksum(body, algorithm=DEFAULT_CHECKSUM_ALGORITHM)
    new_key = backend.put_object(bucket, key, body, storage="STANDARD", encryption=None, kms_key_id=None,
                                 bucket_key_enabled=None, lock_mode=None, lock_legal_status=None, lock_until=None,
                                 checksum_value=checksum.decode("utf-8") if isinstance(checksum, bytes) else checksum)
    new_key.set_metadata(metadata_from_headers(_REQUEST_METADATA))
    new_key.set_acl(stored_bucket.acl)
    new_key.website_redirect_location = None
    new_key.checksum_algorithm = DEFAULT_CHECKSUM_ALGORITHM
    backend.put_object_tagging(new_key, {})
    return new_key
