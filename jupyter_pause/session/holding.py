"""A checkpoint's blobs read and verified in the kernel while its resume waits for resources.

A resume that waits (for a GPU still busy) warms its kernel beside the wait (``server.standby``)
while the server copies the checkpoint onto the node (``server.prefetch``). Once the wait ended,
the restore still read those copies into the kernel's memory and checked them against the
manifest: on two cores, 0.8-1.4 s for a gigabyte, most of what a resume after a wait cost.
``hold`` does that reading during the wait, in the warmed kernel, and keeps what verified in this
process's memory; the restore takes it from there (``fetch``) and reads only the rest.

Nothing held is trusted beyond what was checked. ``hold`` reads exactly as the restore does
(``integrity.fetch``), against a manifest the kernel verifies with its own key (signature, id,
session); a blob is held under what names its content (the hash, the blob's key, which is its
digest, and its size) and handed only to a restore whose manifest names the same. The bytes are
in this process's own memory, which no other process writes, and a blob bound for a GPU is moved
there by the restore (the wait is for that GPU: ``hold`` touches no device). The restore takes
what it needs and lets go of the rest, so a held checkpoint it does not restore (a newer one was
chosen) costs its memory only until then. The node's copies of what is held are removed at
once (``server.prefetch`` made them): the checkpoint is in memory once while the resume waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import units
from ..config import PauseConfig
from ..store import memory
from ..store.buffers import Buffer
from ..store.catalog import Catalog
from ..store.integrity import after, read_manifest
from ..store.integrity import fetch as fetch_verified
from ..store.manifest import Manifest
from ..store.signing import Keys
from ..store.storage import Store
from .context import make_context

#: Share of the memory available (``store.memory``) a checkpoint read ahead from a remote store
#: may take: a wait for a GPU can last hours, on a node whose other work needs memory too.
SHARE = 0.5
#: Verified blobs read ahead of a restore: (hash, blob key, size) -> the bytes.
_held: dict[tuple[str, str, int], Buffer] = {}
_lock = threading.Lock()


@dataclass
class Held:
    """What ``hold`` read and verified, and why each other blob was not held."""

    checkpoint: str
    blobs: int = 0
    bytes: int = 0
    bad: dict[str, str] = field(default_factory=dict)
    #: Why nothing was read ahead ("" where it was).
    skipped: str = ""


def _name(manifest: Manifest, key: str) -> tuple[str, str, int]:
    return manifest.hash, key, manifest.blobs.get(key) or manifest.referenced_size(key)


def _manifest(store: Store, session: str, checkpoint: str, text: str, keys: Keys) -> Manifest:
    """The manifest of ``checkpoint``, verified with this kernel's ``keys``: from ``text`` (as
    the server read it), else from the store; ``ValueError`` saying why where it does not verify."""
    read = read_manifest(text.encode(), checkpoint, keys, session) if text else None
    if not isinstance(read, Manifest):
        read = Catalog(store).manifest(session, checkpoint, keys)
    if not isinstance(read, Manifest):
        raise ValueError(f"checkpoint {checkpoint} of session {session!r} was not read ahead: {read.why}")
    return read


def hold(
    session: str,
    checkpoint: str,
    manifest_text: str = "",
    *,
    store: str | None = None,
    config: PauseConfig | None = None,
) -> Held:
    """Read and verify the blobs ``checkpoint`` of ``session`` needs, in ``store`` (default: the
    configured one), and keep those that verify for its restore; what was held, and what was not
    and why. ``manifest_text``: the manifest as the server read it, verified here with this
    process's key ("": read from the store)."""
    ctx = make_context(store=store, session=session, config=config, namespace={})
    manifest = _manifest(ctx.store, ctx.session, checkpoint, manifest_text, ctx.config.keyring)
    keys = [k for k in manifest.needed() if _name(manifest, k) not in _held]
    too_large = "" if ctx.store.local else _too_large(sum(_name(manifest, k)[2] for k in keys))
    if too_large:  # a local store's files are mapped: their pages are the page cache's to let go
        return Held(checkpoint, skipped=f"{too_large}: the restore reads it once the wait is over")
    good, bad = fetch_verified(ctx.store, manifest, keys)
    with _lock:
        _held.update({_name(manifest, k): data for k, data in good.items()})
        mine = [k for k in manifest.needed() if _name(manifest, k) in _held]
    _drop_copies(ctx.store, manifest, list(good))
    return Held(checkpoint, len(mine), sum(_name(manifest, k)[2] for k in mine), bad)


def _too_large(size: int) -> str:
    """Why ``size`` bytes are too many to read ahead here ("" where they are not)."""
    room = int(SHARE * memory.available())
    if size <= room:
        return ""
    return f"{units.size(size)} would take more than {SHARE:.0%} of the memory available ({units.size(room)})"


def _drop_copies(store: Store, manifest: Manifest, digests: list[str]) -> None:
    """Remove this node's copies of what is held now (``store.prefetched``): a wait for a GPU may
    last hours, and the node's memory would hold the checkpoint twice over meanwhile. Should
    this kernel go away, the resume's next one reads the store."""
    if store.prefetched is None or not digests:
        return
    try:
        paths = manifest.blob_keys(digests, store.names)
    except KeyError:  # named with a key this reader lacks: nothing of it was read, or copied
        return
    store.prefetched.drop(list(paths))


def take(manifest: Manifest, keys: list[str]) -> dict[str, Buffer]:
    """The held blobs among ``keys`` of ``manifest``; everything else held is let go."""
    with _lock:
        held = _held.copy()
        _held.clear()
    return {k: held[_name(manifest, k)] for k in keys if _name(manifest, k) in held}


def fetch(
    store: Store,
    manifest: Manifest,
    keys: list[str],
    progress: Callable[[int], Any] | None = None,
    then: Callable[[str, Buffer], Any] | None = None,
    into: Callable[[str], Callable[[int], Buffer] | None] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """``integrity.fetch`` of ``keys``, the blobs ``hold`` read ahead taken first; ``then`` runs
    on those too (a GPU-bound blob is moved to its device)."""
    held = take(manifest, keys)
    if not held:
        return fetch_verified(store, manifest, keys, progress, then, into)
    base = sum(_name(manifest, k)[2] for k in held)
    if progress is not None:
        progress(base)
    rest = [k for k in keys if k not in held]
    good, bad = fetch_verified(store, manifest, rest, after(progress, base), then, into)
    good.update({k: data if then is None else then(k, data) for k, data in held.items()})
    return good, bad


def forget() -> None:
    """Hold nothing (as a new process)."""
    with _lock:
        _held.clear()
