"""Conditional create on object stores: which fsspec backends send a condition the server checks,
and how a server says the condition failed (the key was there already)."""

from __future__ import annotations

import sys
from typing import Any

#: fsspec backends whose exclusive mode is a condition the server checks (S3 ``If-None-Match: *``,
#: GCS ``ifGenerationMatch=0``, Azure Blob ``If-None-Match: *``), by module and class. Others emulate
#: it by looking first (fsspec's default ``pipe_file``) or ignore it, and a probe cannot tell a
#: look-first from a real condition.
CONDITIONAL_BACKENDS = (("s3fs", "S3FileSystem"), ("gcsfs", "GCSFileSystem"), ("adlfs", "AzureBlobFileSystem"))


def sends_conditions(fs: Any) -> bool:
    """Whether ``fs`` is one of ``CONDITIONAL_BACKENDS`` (each imported already if ``fs`` is one)."""
    for module, name in CONDITIONAL_BACKENDS:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(fs, cls):
            return True
    return False


def precondition_failed(error: BaseException) -> bool:
    """Whether ``error`` is a server's 412 to a conditional put: the key was there already.

    s3fs raises ``FileExistsError`` only when the reply names the ``If-None-Match`` condition;
    servers that leave it out (SeaweedFS) come back as ``OSError(EINVAL)`` caused by the 412.
    """
    seen: BaseException | None = error
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "PreconditionFailed" or status == 412:
                return True
        seen = seen.__cause__ or seen.__context__
    return False
