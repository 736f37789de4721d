"""Checking a checkpoint's bytes against its manifest before anything is unpickled."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import IntegrityError
from . import encryption, mapping, references, seals, signing
from .manifest import FORMAT, Manifest, canonical_body, checksum
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


@dataclass
class Damage:
    """Why a manifest is damaged, in a few words, and when its checkpoint was taken where that
    can still be read (None when the bytes no longer say). ``newer``: intact, but of a format
    newer than this jupyter-pause reads (a newer release wrote it: not damage to clean up)."""

    why: str
    created: float | None = None
    newer: bool = False


def read_manifest(
    data: Buffer, checkpoint_id: str, key: signing.Keys = None, session: str | None = None
) -> Manifest | Damage:
    """The manifest in ``data``, or why it is damaged: checksum, signature (when ``key`` is
    given), a torn write, bytes that are not JSON, an unknown format; found under ``session``
    (when given), one that names another session or another id is refused (``misplaced``)."""
    try:
        manifest = Manifest.from_bytes(data, where=f"manifest {checkpoint_id}")
    except (IntegrityError, TypeError, KeyError, ValueError) as e:
        return manifest_damage(bytes(data), e)
    try:
        signing.verify(manifest, key)
    except signing.SignatureError:
        return Damage(signature_damage(manifest, key), manifest.created)
    why = misplaced(manifest, checkpoint_id, session, key)
    return manifest if why is None else Damage(why, manifest.created)


def misplaced(manifest: Manifest, checkpoint_id: str, session: str | None, key: signing.Keys) -> str | None:
    """Why ``manifest``, found as checkpoint ``checkpoint_id`` of ``session``, is not where it
    belongs (its signed body names another session, id or, with a key, another Hub user); None
    when it is in its place. A checkpoint copied from another session is never loaded here."""
    if session is not None and manifest.session != session:
        return (
            f"misplaced: it is a checkpoint of session {manifest.session!r}, found under session {session!r} "
            "(a copy from another session: never loaded here)"
        )
    if manifest.id != checkpoint_id:
        return f"misplaced: it is checkpoint {manifest.id}, found as {checkpoint_id} (a copy under another name)"
    reader = seals.this_user()
    if signing.keyring(key) is not None and manifest.user and reader and manifest.user != reader:
        return f"misplaced: written by the server of user {manifest.user!r}, read by {reader!r}'s"
    return None


def manifest_damage(data: bytes, error: BaseException) -> Damage:
    """Why ``data``, refused by ``Manifest.from_bytes`` with ``error``, is not a manifest."""
    if not data.strip():
        return Damage("torn write (the manifest file is empty)")
    try:
        outer = json.loads(data)
    except ValueError:
        if data.lstrip().startswith(b'{"manifest":'):
            return Damage(f"torn write (truncated JSON: the manifest stops after {len(data)} bytes)")
        return Damage(f"unreadable JSON ({len(data)} bytes that are not a manifest)")
    if not isinstance(outer, dict) or not isinstance(outer.get("manifest"), dict) or "checksum" not in outer:
        return Damage("not a manifest (JSON without a manifest body and its checksum)")
    body = outer["manifest"]
    created = body.get("created") if isinstance(body.get("created"), (int, float)) else None
    if checksum(canonical_body(body)) != outer["checksum"]:
        return Damage("checksum mismatch (the manifest was changed after it was written)", created)
    found = body.get("format", 0)
    if not isinstance(found, int) or found > FORMAT:
        why = f"unknown format {found} (this jupyter-pause reads format {FORMAT}; upgrade it to read this one)"
        return Damage(why, created, newer=isinstance(found, int))
    return Damage(f"unknown format (fields this jupyter-pause cannot read: {type(error).__name__}: {error})", created)


def signature_damage(manifest: Manifest, keys: signing.Keys) -> str:
    """Why ``signing.verify`` refused ``manifest`` under ``keys``, in a few words."""
    ring = signing.keyring(keys)
    assert ring is not None, "only a key refuses a signature"
    signature = manifest.signature
    if not signature or manifest.canonical is None:
        return "signature: not signed, and a signing key is configured (unset JUPYTER_PAUSE_SIGNING_KEY to load it)"
    key = ring.matching(signature.get("key_id"))
    if key is None:
        theirs = signature.get("key_id")
        return f"signature: signed with another key (key id {theirs}; this one is {signing.accepted(ring)})"
    why = signing.manifest_problem(manifest, ring)
    if why is None:
        return f"signature: signed over {manifest.hash} blob digests, not sha256"
    if why == "changed after it was signed":
        return "signature: does not match (the manifest was changed after it was signed)"
    return f"signature: {why}"


class _Mismatch(Exception):
    """A blob that was read but does not match its manifest entry."""


def after(progress: Progress | None, base: int) -> Progress | None:
    """``progress`` for what is read next, counted after ``base`` bytes already through."""
    if progress is None:
        return None
    report = progress
    return lambda n: report(base + n)


def fetch(
    store: Store,
    manifest: Manifest,
    keys: Iterable[str],
    progress: Progress | None = None,
    then: Callable[[str, Buffer], Any] | None = None,
    into: Callable[[str], Callable[[int], Buffer] | None] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Read blobs in parallel and verify each; returns the good bytes and, for the rest, why not.

    Each blob is verified by the thread that read it, while the others are still arriving.
    ``then(key, data)``, when given, runs next in that thread, on verified bytes only; what it
    returns is kept instead of the bytes (a tensor already moved to its GPU, say). ``into(key)``:
    the memory a blob is read into, where it names an allocator (``Store.read_many``). Blobs that
    are ranges of model files (``Manifest.references``) are read by ``references``, first.
    """
    keys = list(dict.fromkeys(keys))
    good, bad = references.read(store, manifest, keys, progress, then)
    keys = [k for k in keys if k not in manifest.references]
    if good:
        progress = after(progress, sum(manifest.referenced_size(k) for k in good))
    try:  # in the store's pool (by a keyed name where a key named them), or the session's folder
        paths = manifest.blob_keys(keys, store.names)
    except KeyError as e:  # named with a key this reader lacks
        return good, {**bad, **{k: f"not found: {e.args[0]}" for k in keys}}

    def verify(path: str, data: Buffer) -> Any:
        key = paths[path]
        if encryption.opened(data) and len(data) == manifest.blobs.get(key, -1):
            problem = None  # sealed under the user's key for the store key that names its digest: authenticated
        else:
            problem = _problem(data, key, manifest.blobs.get(key, -1), manifest.hash)
        if problem is not None:
            raise _Mismatch(problem)
        mapping.remember_blob(data, manifest.hash, key)  # a later checkpoint may skip rehashing it
        return data if then is None else then(key, data)

    sizes = {path: manifest.blobs[key] for path, key in paths.items() if key in manifest.blobs}
    into_path = None if into is None else (lambda path: into(paths[path]))
    raw = store.read_many(paths, progress=progress, then=verify, mapped=True, sizes=sizes, into=into_path)
    near = [p for p, data in raw.items() if isinstance(data, BaseException) and _prefetched(store, p)]
    if near:  # a copy on this node that does not verify: dropped, and the store read instead
        store.prefetched.drop(near)
        raw.update(store.read_many(near, then=verify, mapped=True, sizes=sizes, into=into_path))
    for path, key in paths.items():
        data = raw[path]
        if isinstance(data, _Mismatch):
            bad[key] = str(data)
        elif isinstance(data, BaseException):
            bad[key] = "missing" if isinstance(data, FileNotFoundError) else f"unreadable: {data}"
        else:
            good[key] = data
    return good, bad


def _prefetched(store: Store, key: str) -> bool:
    return store.prefetched is not None and store.prefetched.find(key) is not None


def check(store: Store, manifest: Manifest) -> dict[str, str]:
    """Verify every blob of a checkpoint, a batch at a time; returns the problems found."""
    problems: dict[str, str] = {}
    batch: list[str] = []
    batch_bytes = 0
    sizes = {**manifest.blobs, **{k: manifest.referenced_size(k) for k in manifest.references}}
    for key, size in sizes.items():
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
