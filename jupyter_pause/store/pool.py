"""What a writer knows the store holds without listing it: the blobs of the last checkpoint this
process committed in a session, and, for any other blob, the store's answer key by key.

The pool (``layout.pool_prefix``) is shared by every session of a store, so it may hold far more
than one session's blobs: a checkpoint never lists it. A synchronous checkpoint starts from what
the session's latest checkpoint committed by this process names (remembered at commit), and asks
the store about each other digest, many at once (``Store.sizes``); before it commits, it looks
again at every blob it did not write (``writer.BlobWriter.finish``). The session's own folder
(blobs written before the store had a pool) is listed, until this process finds it empty: nothing
writes there any more, so it stays empty.
"""

from __future__ import annotations

import threading

from .layout import blob_digest, blob_prefix
from .manifest import Manifest
from .storage import Store

#: By (store URL, session): each blob of the last checkpoint this process committed there, by
#: digest, with its key and size.
_latest: dict[tuple[str, str], dict[str, tuple[str, int]]] = {}
_lock = threading.Lock()
#: Sessions (store URL, session) whose own blob folder this process found empty.
_empty: set[tuple[str, str]] = set()


def remember(store: Store, manifest: Manifest) -> None:
    """Keep what ``manifest`` (just committed) names, for the next checkpoint of its session."""
    keys = manifest.blob_keys(manifest.blobs, store.names)
    blobs = {digest: (key, manifest.blobs[digest]) for key, digest in keys.items()}
    with _lock:
        _latest[(store.url, manifest.session)] = blobs


def forget() -> None:
    """Forget every remembered checkpoint (a new process holds none)."""
    with _lock:
        _latest.clear()
        _empty.clear()


def latest(store: Store, session: str) -> dict[str, tuple[str, int]]:
    """Each blob of the last checkpoint this process committed in ``session`` (digest -> key
    and size); empty where there is none."""
    with _lock:
        return dict(_latest.get((store.url, session), {}))


def session_folder(store: Store, session: str) -> dict[str, tuple[str, int]]:
    """The blobs in ``session``'s own folder (digest -> key and size); not listed again once empty."""
    with _lock:
        if (store.url, session) in _empty:
            return {}
    held = {}
    for key, entry in store.list(blob_prefix(session)).items():
        digest = blob_digest(key)
        if digest is not None:
            held[digest] = (key, entry.size)
    if not held:
        with _lock:
            _empty.add((store.url, session))
    return held
