"""Checking a checkpoint's bytes against its manifest before anything is unpickled."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from . import mapping
from .layout import blob_key
from .manifest import Manifest
from .signing import HASHES, digest
from .storage import Buffer, Progress, Store

#: Bytes read at once when only checking (not keeping) a checkpoint's blobs.
CHECK_BATCH_BYTES = 256 << 20


def _problem(data: Buffer | BaseException, key: str, size: int, algorithm: str) -> str | None:
    if isinstance(data, FileNotFoundError):
        return "missing"
    if isinstance(data, BaseException):
        return f"unreadable: {data}"
    if len(data) != size:
        return f"truncated or resized: {len(data)} of {size} bytes"
    if algorithm not in HASHES:
        return f"digest algorithm {algorithm} is unknown to this jupyter-pause; upgrade it"
    if digest(data, algorithm) != key:
        return "checksum mismatch (bytes changed after writing)"
    return None


class _Mismatch(Exception):
    """A blob that was read but does not match its manifest entry."""


def fetch(
    store: Store,
    manifest: Manifest,
    keys: Iterable[str],
    progress: Progress | None = None,
    then: Callable[[str, Buffer], Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Read blobs in parallel and verify each; returns the good bytes and, for the rest, why not.

    Each blob is verified by the thread that read it, while the others are still arriving.
    ``then(key, data)``, when given, runs next in that thread, on verified bytes only; what it
    returns is kept instead of the bytes (a tensor already moved to its GPU, say).
    """
    paths = {blob_key(manifest.session, k): k for k in dict.fromkeys(keys)}

    def verify(path: str, data: Buffer) -> Any:
        key = paths[path]
        problem = _problem(data, key, manifest.blobs.get(key, -1), manifest.hash)
        if problem is not None:
            raise _Mismatch(problem)
        mapping.remember_blob(data, manifest.hash, key)  # a later checkpoint may skip rehashing it
        return data if then is None else then(key, data)

    raw = store.read_many(paths, progress=progress, then=verify, mapped=True)
    good: dict[str, Any] = {}
    bad: dict[str, str] = {}
    for path, key in paths.items():
        data = raw[path]
        if isinstance(data, _Mismatch):
            bad[key] = str(data)
        elif isinstance(data, BaseException):
            bad[key] = "missing" if isinstance(data, FileNotFoundError) else f"unreadable: {data}"
        else:
            good[key] = data
    return good, bad


def check(store: Store, manifest: Manifest) -> dict[str, str]:
    """Verify every blob of a checkpoint, a batch at a time; returns the problems found."""
    problems: dict[str, str] = {}
    batch: list[str] = []
    batch_bytes = 0
    for key, size in manifest.blobs.items():
        batch.append(key)
        batch_bytes += size
        if batch_bytes >= CHECK_BATCH_BYTES:
            problems.update(fetch(store, manifest, batch)[1])
            batch, batch_bytes = [], 0
    if batch:
        problems.update(fetch(store, manifest, batch)[1])
    return problems


def describe(manifest: Manifest, problems: dict[str, str]) -> str:
    """One line naming what is wrong with a checkpoint, by variable where possible."""
    owners: dict[str, list[str]] = {}
    for v in manifest.variables:
        owners.setdefault(v.blob.key, []).append(f"variable {v.name}")
        for a in v.arrays:
            record = manifest.arrays.get(a)
            if record is not None:
                owners.setdefault(record.blob, []).append(f"array data of {v.name}")
    if manifest.rng is not None:
        owners.setdefault(manifest.rng.key, []).append("RNG state")
    if manifest.loop_state is not None:
        owners.setdefault(manifest.loop_state.key, []).append("loop positions")
    if manifest.notebook:
        owners.setdefault(manifest.notebook["blob"], []).append("notebook")
    parts = []
    for key, problem in problems.items():
        what = ", ".join(dict.fromkeys(owners.get(key, ["blob"])))
        parts.append(f"blob {key[:12]} ({what}) {problem}")
    return "; ".join(parts)
