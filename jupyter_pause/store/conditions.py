"""Conditional create on object stores: which fsspec backends send a condition the server checks,
and how a server says the condition failed (the key was there already)."""

from __future__ import annotations

import secrets
import sys
from typing import Any

from ..errors import StoreError
from .layout import probe_key

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


def probe(store: Any) -> bool:
    """Whether ``store``'s ``create`` is a true create-if-absent: of two racing creates, one fails.

    True for a local folder (``os.link``). For S3, GCS and Azure (``CONDITIONAL_BACKENDS``) a probe
    decides: a private key is created twice and the second create must be refused by the server
    itself, not by looking first; a server that ignores the condition overwrites, and a server that
    rejects conditional puts fails the first. False for every other backend. Raises ``StoreError``
    when the store cannot be written at all.
    """
    if store.local:
        return True
    if not sends_conditions(store.fs):
        return False
    key = probe_key(secrets.token_hex(16))
    try:
        try:
            first = store._create(key, b"first")
        except Exception:  # refused: by any error, as long as a plain write then works
            store.write(key, b"first")  # the store takes plain writes: it refused the condition
            return False
        second = store._create(key, b"second")
        return first and not second and bytes(store.read(key)) == b"first"
    except StoreError:
        raise
    except Exception as e:
        raise store.failure("probe", key, e) from e
    finally:
        store.delete([key])
