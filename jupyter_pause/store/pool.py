"""What a writer knows the store holds without listing it: the blobs of the last checkpoint this
process committed in a session, and, for any other blob, the store's answer key by key.

The pool (``layout.pool_prefix``) is shared by every session of a store, so it may hold far more
than one session's blobs: a checkpoint never lists it. A synchronous checkpoint starts from what
the session's latest checkpoint committed by this process names (remembered at commit), and asks
the store about each other digest, many at once (``Store.sizes``); before it commits, it looks
again at every blob it did not write (``writer.BlobWriter.finish``).
"""

from __future__ import annotations

import threading

from .manifest import Manifest
from .storage import Store

#: By (store URL, session): each blob of the last checkpoint this process committed there, by
#: digest, with its key and size.
_latest: dict[tuple[str, str], dict[str, tuple[str, int]]] = {}
_lock = threading.Lock()


def remember(store: Store, manifest: Manifest) -> None:
    """Keep what ``manifest`` (just committed) names, for the next checkpoint of its session."""
    keys = manifest.blob_keys(manifest.blobs)
    blobs = {digest: (key, manifest.blobs[digest]) for key, digest in keys.items()}
    with _lock:
        _latest[(store.url, manifest.session)] = blobs


def forget() -> None:
    """Forget every remembered checkpoint (a new process holds none)."""
    with _lock:
        _latest.clear()


def latest(store: Store, session: str) -> dict[str, tuple[str, int]]:
    """Each blob of the last checkpoint this process committed in ``session`` (digest -> key
    and size); empty where there is none."""
    with _lock:
        return dict(_latest.get((store.url, session), {}))
