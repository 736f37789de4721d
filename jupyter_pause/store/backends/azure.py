"""Azure Blob Storage (adlfs): a small blob in one request."""

from __future__ import annotations

from ..buffers import REMOTE_BLOCK
from .base import Backend


class AzureBackend(Backend):
    """adlfs's ``AzureBlobFileSystem``."""

    name = "Azure Blob"

    def write(self, path: str, view: memoryview) -> None:
        """A blob of one part in one request (``upload_blob``): adlfs's file object stages a block
        and commits it, two. (s3fs and gcsfs send a small file object's bytes in one request.)"""
        if len(view) <= REMOTE_BLOCK:
            self.fs.pipe_file(path, bytes(view))
            return
        super().write(path, view)
