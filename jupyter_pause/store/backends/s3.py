"""S3 and S3-compatible servers (s3fs): whole-object GETs without a HEAD, blobs read straight
into their buffers (``direct``), batch deletes whose refusals are read, a missing bucket told from
an empty prefix by the server's reply, and multipart uploads that a write cut short leaves behind
(see ``store.uploads``)."""

from __future__ import annotations

from typing import Any

from ..buffers import Buffer
from .base import Backend
from .direct import DirectGet

#: Keys per S3 batch delete (DeleteObjects takes at most 1000).
DELETE_BATCH = 1000


def reply(error: BaseException) -> tuple[str | None, int | None]:
    """The error code and HTTP status of the S3 reply behind ``error``; ``(None, None)`` if no
    reply is (s3fs keeps botocore's ``ClientError``, which holds it, as the cause)."""
    seen: BaseException | None = error
    for _ in range(16):
        if seen is None:
            break
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            return response.get("Error", {}).get("Code"), response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        seen = seen.__cause__ or seen.__context__
    return None, None


class S3Backend(Backend):
    """s3fs's ``S3FileSystem``."""

    name = "S3"
    lists_uploads = True
    #: s3fs would ask for the size first (a HEAD) to split a GET into ranges: one GET instead.
    whole = {"max_concurrency": 1}
    #: Objects at least this large, of a known size, are read by presigned GETs (``direct``).
    DIRECT_BYTES = 256 << 10

    def __init__(self, fs: Any) -> None:
        super().__init__(fs)
        self.direct = DirectGet.of(fs)

    def read(self, path: str, size: int | None, unchanging: bool, mapped: bool = False) -> Buffer:
        """As ``Backend.read``; a blob of a known size straight into its buffer where it can be."""
        direct = self._direct(path, size)
        return direct if direct is not None else super().read(path, size, unchanging, mapped)

    def copy_of(self, path: str, size: int) -> bytes | Buffer:
        """As ``Backend.copy_of``, straight into a buffer where it can be (a prefetch's copies)."""
        direct = self._direct(path, size)
        return direct if direct is not None else super().copy_of(path, size)

    def _direct(self, path: str, size: int | None) -> Buffer | None:
        """The object read by a presigned GET, where it is large enough and that road is open;
        None, and s3fs reads it, otherwise."""
        if size is None or size < self.DIRECT_BYTES or self.direct is None:
            return None
        return self.direct.read(path, size)

    def delete(self, paths: list[str]) -> list[tuple[int, str]]:
        """Batch deletes (DeleteObjects), whose per-key refusals are returned.

        A batch delete answers 200 whatever became of each key, and lists the keys it did not
        delete, with why, in the reply's ``Errors``; s3fs's ``rm`` drops that list, so a refused
        delete (``AccessDenied``: a key scoped to another prefix, a bucket policy, object lock)
        would pass for done. S3 deletes a key that is not there without error, and a bucket that
        is not there holds nothing to delete: both stay silent, as on every other backend.
        """
        index: dict[str, int] = {}  # S3 object key -> its place in paths
        bucket = ""
        for i, path in enumerate(paths):
            bucket, name, _ = self.fs.split_path(path)
            index.setdefault(name, i)
        names = list(index)
        refused: list[tuple[int, str]] = []
        for start in range(0, len(names), DELETE_BATCH):
            batch = names[start : start + DELETE_BATCH]
            objects = {"Objects": [{"Key": name} for name in batch], "Quiet": True}
            try:
                answer: dict[str, Any] = self.fs.call_s3("delete_objects", Bucket=bucket, Delete=objects)
            except FileNotFoundError:  # NoSuchBucket: nothing there to delete
                return []
            finally:
                for name in batch:  # forget what this client listed of these keys before
                    self.fs.invalidate_cache(f"{bucket}/{name}")
            for error in answer.get("Errors") or []:
                if error.get("Code") != "NoSuchKey":
                    why = f"{error.get('Message') or 'refused'} ({error.get('Code') or 'no error code'})"
                    refused.append((index.get(error.get("Key"), index[batch[0]]), why))
        return refused

    async def _size(self, path: str) -> int | None:
        """One HEAD of the object: s3fs's ``info`` would list the key as a folder when it is absent."""
        bucket, name, _ = self.fs.split_path(path)
        try:
            answer = await self.fs._call_s3("head_object", Bucket=bucket, Key=name)
        except FileNotFoundError:
            return None
        return int(answer.get("ContentLength") or 0)

    def bucket_missing(self, bucket: str, error: FileNotFoundError) -> bool:
        """An S3 listing answered 404 (``NoSuchBucket``) names a missing bucket: listing a prefix
        with nothing under it is no error on S3. s3fs raises a ``FileNotFoundError`` of its own,
        with no reply behind it, when its listing worked and found nothing: an empty prefix.
        The bucket itself is not asked about: a key confined to a prefix (an IAM policy on
        ``s3:prefix``, a SeaweedFS ``Read:bucket/prefix/*`` action) may list its prefix but not
        look at the bucket (``HeadBucket`` is refused), which s3fs's ``exists`` takes for absent.
        """
        code, status = reply(error)
        return code == "NoSuchBucket" or status == 404
