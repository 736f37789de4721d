"""Giving every array a blob: its own when large, a shared pack of small ones otherwise.

Large arrays are hashed in parallel; those a resume mapped from a blob and nothing wrote since
keep that blob's key unread (``mapping``), and so do those nothing wrote since the last checkpoint
hashed them (``writewatch``). The plan also holds the digests of whole storages, which the value
digests reuse instead of reading those bytes again.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..store import mapping, signing
from ..store.manifest import ArrayRecord, FileRange
from ..store.storage import ALIGNMENT
from ..store.writer import Stored
from . import writewatch
from .digests import Known, remember
from .filerefs import Matched, Matcher
from .pickler import DumpResult

#: Arrays at least this large get a blob of their own; smaller ones share packed blobs.
OWN_BLOB_BYTES = 1 << 20
#: Size at which a pack of small arrays is closed.
PACK_BYTES = 16 << 20

#: Threads hashing array blobs at once.
HASH_THREADS = min(8, os.cpu_count() or 1)

#: Arrays to hash that are no more than this in all are hashed at once, even where the writer could
#: hash them as it writes them (``defer``): every digest is then known by the end of the plan, so
#: the restore test's evidence is taken and the model checks start while the capture goes on
#: (``session.evidence``). A few milliseconds of hashing, against the checks' tens.
HASH_NOW_BYTES = 64 << 20


@dataclass(kw_only=True)
class ArrayPlan:
    """Where each collected array goes, and the blobs that hold them (see ``plan_arrays``)."""

    arrays: dict[str, ArrayRecord]  # by array key; ``blob`` stays empty while unhashed
    payloads: dict[str, Any]  # blob key -> the bytes to write
    known: Known  # xxh3 digests of whole storages, reused by the value digests
    unread: int  # bytes known unchanged since a resume, without reading them
    unhashed: dict[str, Any]  # array key -> data left for the writer to hash as it writes it
    #: Blobs that are ranges of model files, not written (see ``filerefs``): digest -> ranges.
    references: dict[str, list[FileRange]]
    #: Arrays write-protected before hashing, to ``writewatch.settle`` once their keys are known.
    watched: writewatch.Watched


def _unwritten_blob(found: Any, algorithm: str, flags: int | None) -> str | None:
    """The key of the blob ``found`` was mapped from by a resume, if not a byte of it changed
    (``flags``: ``mapping.pagemap()``'s)."""
    if found.origin is None or found.origin[0] != "cpu" or found.private:
        return None
    return mapping.unchanged_blob(found.origin[1], found.origin[2], algorithm, flags)


def _large_keys(
    large: list[tuple[str, Any]],
    algorithm: str,
    matched: Matched | None,
    defer: bool,
    watch: list[tuple[int, int]] | None,
) -> tuple[dict[str, str], dict[str, Any], int, writewatch.Watched]:
    """The blob key of each large array, the arrays left for the writer to hash (``defer``), how
    many bytes nothing needed to read again, and the arrays protected before hashing (those in
    ``watch``'s memory)."""
    # Cheapest first: storages whose fingerprint on their device matched the previous
    # checkpoint's (``devicehash``: not even copied), then memory a resume mapped from a blob
    # that nothing wrote since.
    keys = {k: f.reused for k, f in large if f.reused is not None}
    with mapping.pagemap() as flags:
        for k, f in large:
            if k not in keys and (unread_key := _unwritten_blob(f, algorithm, flags)) is not None:
                keys[k] = unread_key
    unread = {k for k, f in large if k in keys and f.reused is None}
    if matched is not None:  # hashed already, looking for model files' tensors
        keys.update((k, matched.hashed[k]) for k, _ in large if k not in keys and k in matched.hashed)
    # Then memory nothing wrote since the last checkpoint hashed it; the rest is protected first.
    candidates = [(k, f) for k, f in large if k not in keys]
    watched = writewatch.check(candidates, algorithm, watch) if watch is not None else writewatch.Watched()
    keys.update(watched.known)
    unread.update(watched.known)
    unknown = [(k, f) for k, f in large if k not in keys]
    defer = defer and sum(f.size for _, f in unknown) > HASH_NOW_BYTES
    deferred = {k: f.data for k, f in unknown} if defer else {}
    if not defer:
        with ThreadPoolExecutor(HASH_THREADS) as pool:
            digests = pool.map(lambda kf: signing.digest(kf[1].data, algorithm), unknown)
            keys.update(zip((k for k, _ in unknown), digests, strict=True))
    return keys, deferred, sum(f.size for k, f in large if k in unread), watched


def plan_arrays(
    dump: DumpResult,
    algorithm: str,
    defer: bool = False,
    files: Matcher | None = None,
    watch: list[tuple[int, int]] | None = None,
) -> ArrayPlan:
    """Give every collected array a blob: its own when large, a shared pack when small, or,
    when ``files`` finds it is a model file's tensor(s), a reference to them.

    Large arrays are hashed in parallel (both digest algorithms release the GIL), except those
    still exactly as a resume mapped them from their blob or as the last checkpoint hashed them
    (``writewatch``, for arrays in ``watch``: the memory where writes are tracked,
    ``writewatch.memory``; None tracks nothing), and, with ``defer``, those left for the writer to
    hash as it writes them. For xxh3 checkpoints the plan also holds the digests of whole storages,
    which the value digests reuse instead of reading those bytes again.
    """
    records: dict[str, ArrayRecord] = {}
    payloads: dict[str, Any] = {}
    known: Known = {}
    pack: list[tuple[str, memoryview]] = []
    pack_size = 0
    matched = files.match(dump.collector.found) if files is not None else None
    referenced = matched.references if matched is not None else {}
    large = [(k, f) for k, f in dump.collector.found.items() if f.size >= OWN_BLOB_BYTES and k not in referenced]
    keys, deferred, unread, watched = _large_keys(large, algorithm, matched, defer, watch)

    def close_pack() -> None:
        nonlocal pack, pack_size
        if not pack:
            return
        data = bytearray(pack_size)
        for array_key, view in pack:
            offset = records[array_key].offset
            data[offset : offset + len(view)] = view
        key = signing.digest(data, algorithm)
        payloads[key] = data
        for array_key, _ in pack:
            records[array_key].blob = key
        pack, pack_size = [], 0

    for array_key, found in dump.collector.found.items():
        size = found.size
        record = ArrayRecord(
            kind=found.kind,
            dtype=found.dtype,
            shape=found.shape,
            device=found.device,
            blob="",  # set once hashed, here or by the writer
            offset=0,
            nbytes=size,
            order=found.order,
        )
        records[array_key] = record
        if array_key in referenced:
            record.blob = referenced[array_key][0]
            remember(known, found.origin, record.blob, algorithm)
            continue
        if array_key in deferred:
            continue  # hashed while it is written: see ``capture.take_keys``
        if array_key in keys:
            record.blob = keys[array_key]
            payloads[record.blob] = found.data if found.reused is None else Stored(size)
            remember(known, found.origin, record.blob, algorithm)
            continue
        record.offset = -pack_size % ALIGNMENT + pack_size  # aligned as torch aligns its own
        pack.append((array_key, found.data))
        pack_size = record.offset + size
        if pack_size >= PACK_BYTES:
            close_pack()
    close_pack()
    return ArrayPlan(
        arrays=records,
        payloads=payloads,
        known=known,
        unread=unread,
        unhashed=deferred,
        references=dict(referenced.values()),
        watched=watched,
    )
