"""Reading the array blobs a checkpoint references in model files, each verified by its digest.

A referenced blob (``Manifest.references``) is the bytes of one or more ranges of model files,
one after the other. Its bytes come from the first source that gives the blob's digest: on a
remote store, a copy of the file where the kernel that took the checkpoint read it (same size;
its bytes are verified all the same), then the store's pool; on a local store, the pool (mapped:
no copy where a tensor starts aligned), then that copy. A blob no source gives is named as
damaged, as a missing or changed blob is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import StoreError
from . import mapping, signing
from .buffers import ALIGNMENT, buffer, read_local
from .layout import pool_key
from .manifest import FileRange, Manifest
from .storage import PARALLELISM, Buffer, Progress, Store

#: A remote model file of which at least this share is wanted is read whole, in parallel parts.
WHOLE_SHARE = 0.5

Reader = Callable[[int, int], Buffer]


class _Sources:
    """Where each model file of one checkpoint can be read, in order of preference, opened once."""

    def __init__(self, store: Store, manifest: Manifest, wanted: dict[str, int]) -> None:
        self.store, self.manifest, self.wanted = store, manifest, wanted
        self._opened: dict[tuple[str, str], Reader | BaseException] = {}
        self._lock = threading.Lock()  # each file opened once, however many threads ask

    def places(self, file: str) -> list[str]:
        """``local:<path>`` and ``pool`` for ``file``, in the order they are tried."""
        record = self.manifest.model_files.get(file)
        copy = []
        if record is not None and record.path:
            try:
                if os.path.getsize(record.path) == record.size:
                    copy = [f"local:{record.path}"]
            except OSError:
                pass
        return ["pool", *copy] if self.store.local else [*copy, "pool"]

    def reader(self, file: str, place: str) -> Reader:
        """A function reading bytes ``[start, stop)`` of ``file`` from ``place`` (raises when it cannot)."""
        key = (file, place)
        with self._lock:
            if key not in self._opened:
                try:
                    self._opened[key] = self._open(file, place)
                except (OSError, ValueError, StoreError) as e:
                    self._opened[key] = e
            found = self._opened[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def _open(self, file: str, place: str) -> Reader:
        store, size = self.store, self.manifest.model_files[file].size
        if place.startswith("local:") or store.local:
            path = place[len("local:") :] if place.startswith("local:") else store.path(pool_key(file))
            view = mapping.map_file(path) or read_local(path)
            if len(view) != size:
                raise ValueError(f"it holds {len(view)} bytes, not {size}")
            return lambda start, stop: view[start:stop]
        if self.wanted.get(file, 0) >= WHOLE_SHARE * size:
            whole = store.read(pool_key(file), size=size)
            return lambda start, stop: whole[start:stop]
        path = store.path(pool_key(file))
        return lambda start, stop: memoryview(store.fs.cat_file(path, start=start, end=stop))


def _assemble(ranges: list[FileRange], read: Callable[[FileRange], Buffer]) -> Buffer:
    """The bytes of ``ranges`` one after the other: a view where one aligned range is all, else a copy."""
    if len(ranges) == 1 and ranges[0].start % ALIGNMENT == 0:
        return read(ranges[0])
    out = buffer(sum(r.stop - r.start for r in ranges))
    offset = 0
    for r in ranges:
        part = read(r)
        if len(part) != r.stop - r.start:
            raise ValueError(f"the file ends before byte {r.stop}")
        out[offset : offset + len(part)] = part
        offset += len(part)
    return out


def _one(sources: _Sources, digest: str, algorithm: str) -> Buffer | str:
    """The verified bytes of referenced blob ``digest``, or why no source gives them."""
    ranges = sources.manifest.references[digest]
    size = sum(r.stop - r.start for r in ranges)
    files = list(dict.fromkeys(r.file for r in ranges))
    whys = []
    for place in sources.places(files[0]) if len(files) == 1 else ["pool"]:
        try:
            data = _assemble(ranges, lambda r, at=place: sources.reader(r.file, at)(r.start, r.stop))
        except FileNotFoundError:
            whys.append(f"{place.split(':')[0]}: missing")
            continue
        except (OSError, ValueError, StoreError) as e:
            whys.append(f"{place.split(':')[0]}: unreadable ({e})")
            continue
        if len(data) == size and signing.digest(data, algorithm) == digest:
            return data
        whys.append(f"{place.split(':')[0]}: checksum mismatch (the model file's bytes differ)")
    tensors = ", ".join(r.tensor for r in ranges[:3])
    return f"its model file {files[0][:12]} does not give tensor(s) {tensors}: {'; '.join(whys)}"


def read(
    store: Store,
    manifest: Manifest,
    digests: Iterable[str],
    progress: Progress | None = None,
    then: Callable[[str, Buffer], Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Read and verify referenced blobs ``digests``: the good bytes (or what ``then`` made of
    them) and, for the rest, why not."""
    digests = [d for d in dict.fromkeys(digests) if d in manifest.references]
    wanted: dict[str, int] = {}
    for d in digests:
        for r in manifest.references[d]:
            wanted[r.file] = wanted.get(r.file, 0) + r.stop - r.start
    sources = _Sources(store, manifest, wanted)
    good: dict[str, Any] = {}
    bad: dict[str, str] = {}
    done = 0

    def one(digest: str) -> Any:
        found = _one(sources, digest, manifest.hash)
        if isinstance(found, str) or then is None:
            return found
        return then(digest, found)

    with ThreadPoolExecutor(PARALLELISM) as pool:
        for digest, found in zip(digests, pool.map(one, digests), strict=True):
            if isinstance(found, str):
                bad[digest] = found
                continue
            good[digest] = found
            done += manifest.referenced_size(digest)
            if progress is not None:
                progress(done)
    return good, bad
