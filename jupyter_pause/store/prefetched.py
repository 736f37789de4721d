"""Node-local copies of a store's pool objects, fetched ahead of a resume (``server.prefetch``).

A resume on a new node reads its checkpoint's blobs from a remote store. The server fetches them
as soon as Resume is clicked, while the resume waits for a GPU and while its kernel starts, into
a folder on this node (``Prefetched``): the objects' bytes as the store holds them (ciphertext
where the store is encrypted), under their keys. A kernel's ``Store`` reads a pool blob from there
when it is there, mapping the file as it maps a local store's, and verifies it exactly as it
verifies what it reads from the store: the folder is a faster place to read from, never a reason
to trust. Only pool blobs go there: named by (a keyed HMAC of) their digest, they never change.

One folder per store URL (``for_store``), so the server and the kernels it starts, configured
alike, find the same one. A copy appears whole or not at all (written under a temporary name,
then renamed).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from pathlib import Path

from . import layout


class Prefetched:
    """The folder of one store's prefetched pool objects on this node."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        """Where the copy of ``key`` is (or would be)."""
        return self.root / key

    def find(self, key: str) -> str | None:
        """The copy of pool object ``key`` on this node, or None (none, or not a pool object)."""
        if not layout.pool_digest(key):
            return None
        path = self.path(key)
        return str(path) if path.is_file() else None

    def put(self, key: str, data: memoryview | bytes) -> int:
        """Keep ``data`` (the bytes the store holds at ``key``) as its copy; the bytes written."""
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
        try:
            with open(partial, "wb") as f:
                f.write(data)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return len(data)

    def drop(self, keys: list[str]) -> None:
        """Remove the copies of ``keys`` (those there)."""
        for key in keys:
            self.path(key).unlink(missing_ok=True)

    def clear(self) -> None:
        """Remove every copy (a server starting: what an earlier one left behind)."""
        shutil.rmtree(self.root, ignore_errors=True)


def for_store(root: str, url: str) -> Prefetched:
    """The prefetch folder of the store at ``url`` under ``root`` (one folder per store URL)."""
    return Prefetched(os.path.join(root, hashlib.sha256(url.encode()).hexdigest()[:16]))
