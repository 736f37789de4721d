"""Data files in the store's pool: their digests here, and staging them from the pool onto a node.

A checkpoint keeps a file that a value reads by path (a ``datasets`` Arrow file) as one blob of
the pool, by the digest of its bytes in the checkpoint's algorithm (``signing``), under the name
the checkpoint's key gives that digest (``Manifest.blob_key``; keyed, with a key, so no one
without it can plant one). On resume, a file is used where it was read when that path holds the
same bytes; else it is copied from the pool (through the store, so an encrypted object is opened)
into a node-local folder, ``<root>/<digest>/<name>``, and its bytes hashed there before anything
reads them: an object planted under the pool's name (same name, same size, other bytes) is
refused, never used.
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
from pathlib import Path

from ..errors import IntegrityError, StoreError
from . import signing
from .storage import Store

_lock = threading.Lock()
#: Digests of files read in this process, by (the file's identity, algorithm).
_digests: dict[tuple[object, ...], str] = {}


def identity(path: str) -> tuple[object, ...]:
    """What tells one version of the file at ``path`` from another without reading it."""
    stat = os.stat(path)
    return (os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _hash(path: str, algorithm: str) -> str:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return signing.digest(b"", algorithm)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return signing.digest(mapped, algorithm)


def file_digest(path: str, algorithm: str) -> str:
    """The digest of the bytes of the file at ``path``: read once per version of the file and process."""
    key = (*identity(path), algorithm)
    with _lock:
        found = _digests.get(key)
    if found is None:
        found = _hash(path, algorithm)
        with _lock:
            _digests[key] = found
    return found


def holds(path: str, digest: str, size: int, algorithm: str) -> bool:
    """Whether the file at ``path`` exists here and holds the bytes named ``digest`` (of ``size``)."""
    try:
        return os.path.getsize(path) == size and file_digest(path, algorithm) == digest
    except OSError:
        return False


def stage(store: Store, key: str, digest: str, size: int, algorithm: str, root: str, name: str) -> str:
    """The pool's file ``digest`` (at ``key``) as a local file under ``root``, its bytes verified:
    one staged before (and still whole) is used again, else it is copied from ``store`` first.

    Raises ``IntegrityError`` when the pool's object holds other bytes, ``StoreError`` when it
    cannot be read or the folder cannot be written.
    """
    folder = Path(root) / digest
    target = folder / (os.path.basename(name) or "data")
    if holds(str(target), digest, size, algorithm):
        return str(target)
    partial = folder / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.part"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        store.download(key, str(partial))
    except FileNotFoundError as e:
        partial.unlink(missing_ok=True)
        raise StoreError(f"data file {name} ({digest[:12]}) is not in the store's pool ({key})") from e
    except (OSError, StoreError, IntegrityError) as e:
        partial.unlink(missing_ok=True)
        raise StoreError(f"data file {name} ({digest[:12]}) could not be copied from {key} into {folder}: {e}") from e
    try:
        got_size = os.path.getsize(partial)
        got = _hash(str(partial), algorithm) if got_size == size else ""
        if got != digest:
            raise IntegrityError(
                f"the store's {key} does not hold data file {name}: "
                + (f"{got_size} bytes, not {size}" if got_size != size else "its bytes have another digest")
                + " (damaged, or put there by someone else); remove it and take the checkpoint again where the "
                "file is"
            )
        os.chmod(partial, 0o444)  # what a digest names never changes
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return str(target)


def forget() -> None:
    """Forget every file digest (a new process knows none)."""
    with _lock:
        _digests.clear()
