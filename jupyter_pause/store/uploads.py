"""Incomplete multipart uploads under a store's prefix: found, sized and aborted.

A write cut off mid-way (a SIGKILL, an OOM kill, a spot reclaim) can leave an upload started and
never completed. It appears in no listing of keys, yet S3 keeps its parts, and bills them, until
someone aborts it. Only S3 lists them (``ListMultipartUploads``); ``unlisted`` says why another
store's cannot be, or None where they can be (or where a store has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .storage import Store

#: Why gc cannot list a backend's unfinished uploads, by fsspec module (what becomes of them instead).
UNLISTED = {
    "gcsfs": "gcsfs writes large objects as resumable uploads, which GCS does not list (it drops an "
    "unfinished one a week after it started)",
    "adlfs": "adlfs writes large blobs as uncommitted blocks, which Azure does not list as blobs (it drops "
    "uncommitted blocks a week after they were staged)",
}


@dataclass(frozen=True)
class Upload:
    """One multipart upload begun and never completed: the store key it was for, its upload id,
    when it began (epoch seconds) and the bytes of the parts it holds."""

    key: str
    upload_id: str
    initiated: float | None
    size: int


def unlisted(store: Store) -> str | None:
    """Why ``store``'s incomplete uploads cannot be listed; None on S3, and on local and memory
    stores (which have no multipart uploads)."""
    if store.local or store.backend.lists_uploads or type(store.fs).__name__ == "MemoryFileSystem":
        return None
    module = type(store.fs).__module__.split(".", 1)[0]
    return UNLISTED.get(module, f"the {module} backend offers no way to list unfinished uploads")


def _bucket_and_name(store: Store, prefix: str) -> tuple[str, str]:
    """The bucket of ``store`` and the object-key prefix of its ``prefix``."""
    bucket, name, _ = store.fs.split_path(store.path(prefix))
    if prefix.endswith("/") and name and not name.endswith("/"):
        name += "/"
    return bucket, name


def _parts_size(store: Store, bucket: str, name: str, upload_id: str) -> int:
    """Bytes in the parts uploaded so far to one upload (0 if it is gone meanwhile)."""
    total, marker = 0, 0
    while True:
        try:
            reply = store.fs.call_s3("list_parts", Bucket=bucket, Key=name, UploadId=upload_id, PartNumberMarker=marker)
        except FileNotFoundError:  # NoSuchUpload: completed or aborted since it was listed
            return total
        total += sum(int(part.get("Size") or 0) for part in reply.get("Parts") or [])
        if not reply.get("IsTruncated"):
            return total
        marker = int(reply.get("NextPartNumberMarker") or 0)


def incomplete(store: Store, prefix: str) -> list[Upload]:
    """Every incomplete multipart upload under ``prefix``; empty on a store without them.

    Call ``unlisted`` first: on a store whose uploads cannot be listed this finds none.
    """
    if not store.backend.lists_uploads:
        return []
    bucket, name = _bucket_and_name(store, prefix)
    root = store.fs.split_path(store.root)[1].strip("/")
    found: list[Upload] = []
    markers: dict[str, Any] = {}
    try:
        while True:
            reply = store.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=name, **markers)
            for upload in reply.get("Uploads") or []:
                key, upload_id = upload["Key"], upload["UploadId"]
                started = upload.get("Initiated")
                initiated = float(started.timestamp()) if hasattr(started, "timestamp") else None
                size = _parts_size(store, bucket, key, upload_id)
                found.append(Upload(key[len(root) + 1 :] if root else key, upload_id, initiated, size))
            if not reply.get("IsTruncated"):
                return found
            markers = {"KeyMarker": reply.get("NextKeyMarker"), "UploadIdMarker": reply.get("NextUploadIdMarker")}
    except FileNotFoundError:  # NoSuchBucket: nothing there
        return found
    except Exception as e:
        raise store.failure("list unfinished uploads under", prefix, e) from e


def abort(store: Store, uploads: list[Upload]) -> None:
    """Abort ``uploads``, freeing their parts; one already completed or aborted is passed over."""
    for upload in uploads:
        bucket, name = _bucket_and_name(store, upload.key)
        try:
            store.fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=name, UploadId=upload.upload_id)
        except FileNotFoundError:
            continue
        except Exception as e:
            raise store.failure("abort the unfinished upload of", upload.key, e) from e
