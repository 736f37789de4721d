"""Storage backends: what differs between a local folder, S3, GCS, Azure Blob and any other
filesystem fsspec opens, behind one interface (``Backend``), one module each.

``Store`` (``store.storage``) holds what every store shares (keys, credentials, errors that say
what to do, parallel reads and writes) and asks its backend, chosen by ``for_filesystem``, for
the rest: how one object is written, created only if absent, read, deleted, and whether a bucket
is missing. A backend module imports its fsspec library's classes only when the filesystem is
one of them (each is an optional dependency).
"""

from __future__ import annotations

import sys
from typing import Any

from .azure import AzureBackend
from .base import Backend
from .gcs import GCSBackend
from .local import LocalBackend
from .s3 import S3Backend

#: fsspec module and class -> the backend that knows it; anything else gets ``Backend``.
KNOWN: tuple[tuple[str, str, type[Backend]], ...] = (
    ("fsspec.implementations.local", "LocalFileSystem", LocalBackend),
    ("s3fs", "S3FileSystem", S3Backend),
    ("gcsfs", "GCSFileSystem", GCSBackend),
    ("adlfs", "AzureBlobFileSystem", AzureBackend),
)


def for_filesystem(fs: Any) -> Backend:
    """The backend of ``fs`` (its fsspec library is imported already if ``fs`` is one of its)."""
    for module, name, backend in KNOWN:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(fs, cls):
            return backend(fs)
    return Backend(fs)


__all__ = ["AzureBackend", "Backend", "GCSBackend", "LocalBackend", "S3Backend", "for_filesystem"]
