"""Reading the array blobs a checkpoint references in model files, each verified by its digest.

A referenced blob (``Manifest.references``) is the bytes of one or more ranges of model files,
one after the other. Its bytes come from the first source that gives the blob's digest, the one
in the user's signed manifest: never from one because of its name. On a remote or encrypted
store, a copy of the file on this node (where the kernel that took the checkpoint read it, or
the Hugging Face cache's file of that sha256; same size; its bytes are verified all the same),
then the store's pool, under the name the manifest's key gives the file; on a local folder that
is not encrypted, the pool (mapped: no copy where a tensor starts aligned), then those copies.

A tensor that does not verify is never loaded. A blob no source gives is named as damaged, as a
missing or changed blob is (the resume then goes back to an older checkpoint); a source passed
over for another that verified is named too (``passed_over``), so the resume says what it did
not use and why.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import IntegrityError, StoreError
from . import hubcache, mapping, signing
from .buffers import ALIGNMENT, buffer, read_local
from .manifest import FileRange, Manifest
from .storage import PARALLELISM, Buffer, Progress, Store

#: A remote model file of which at least this share is wanted is read whole, in parallel parts.
WHOLE_SHARE = 0.5

#: What each kind of place is called in a message.
PLACES = {"pool": "the store's pool", "local": "its copy where it was read", "cache": "the Hugging Face cache's copy"}

Reader = Callable[[int, int], Buffer]

_passed_lock = threading.Lock()
#: Sources passed over by reads of each checkpoint, by (store URL, checkpoint id): lines to show.
_passed: dict[tuple[str, str], list[str]] = {}
#: Checkpoints whose passed-over sources are kept, at most (the oldest are forgotten).
PASSED_KEPT = 64


def _sized(path: str, size: int) -> bool:
    try:
        return os.path.getsize(path) == size
    except OSError:
        return False


class _Sources:
    """Where each model file of one checkpoint can be read, in order of preference, opened once."""

    def __init__(self, store: Store, manifest: Manifest, wanted: dict[str, int]) -> None:
        self.store, self.manifest, self.wanted = store, manifest, wanted
        self._opened: dict[tuple[str, str], Reader | BaseException] = {}
        self._places: dict[str, list[str]] = {}
        self._lock = threading.Lock()  # each file opened once, however many threads ask
        #: Per file: the place that gave its bytes after others failed, and why each of those did.
        self.passed: dict[str, tuple[str, dict[str, str]]] = {}

    def places(self, file: str) -> list[str]:
        """``local:<path>``, ``cache:<path>`` and ``pool`` for ``file``, in the order they are tried."""
        with self._lock:
            found = self._places.get(file)
        if found is not None:
            return found
        record = self.manifest.model_files.get(file)
        copies: dict[str, str] = {}
        if record is not None:
            if record.path and _sized(record.path, record.size):
                copies.setdefault(os.path.realpath(record.path), f"local:{record.path}")
            for path in hubcache.cached(file, record.size):
                copies.setdefault(os.path.realpath(path), f"cache:{path}")
        found = ["pool", *copies.values()] if self.store.mappable else [*copies.values(), "pool"]
        with self._lock:
            return self._places.setdefault(file, found)

    def reader(self, file: str, place: str) -> Reader:
        """A function reading bytes ``[start, stop)`` of ``file`` from ``place`` (raises when it cannot)."""
        key = (file, place)
        with self._lock:
            if key not in self._opened:
                try:
                    self._opened[key] = self._open(file, place)
                except (OSError, ValueError, StoreError, IntegrityError) as e:
                    self._opened[key] = e
            found = self._opened[key]
        if isinstance(found, BaseException):
            raise found
        return found

    def _open(self, file: str, place: str) -> Reader:
        store, size = self.store, self.manifest.model_files[file].size
        if place != "pool":
            return _whole(place.split(":", 1)[1], size)
        try:
            key = self.manifest.file_key(file, store.names)
        except KeyError as e:
            raise StoreError(str(e.args[0]) if e.args else str(e)) from e
        if store.mappable:
            return _whole(store.path(key), size)
        if self.wanted.get(file, 0) >= WHOLE_SHARE * size:
            whole = store.read(key, size=size)
            if len(whole) != size:
                raise ValueError(f"it holds {len(whole)} bytes, not {size}")
            return lambda start, stop: whole[start:stop]
        return lambda start, stop: store.read_range(key, start, stop)

    def passed_over(self, file: str, used: str, whys: dict[str, str]) -> None:
        """Note that ``file``'s bytes came from ``used`` after the places in ``whys`` failed."""
        with self._lock:
            self.passed.setdefault(file, (used, whys))

    def lines(self) -> list[str]:
        """One line per file read from a place after others failed: what was passed over, and why."""
        out = []
        for file, (used, whys) in sorted(self.passed.items()):
            skipped = "; ".join(f"{_label(p)}: {why}" for p, why in whys.items())
            out.append(f"model file {file[:12]}: read from {_label(used)}, passed over {skipped}")
        return out


def _label(place: str) -> str:
    kind, _, path = place.partition(":")
    return PLACES.get(kind, kind) + (f" {path}" if path else "")


def _whole(path: str, size: int) -> Reader:
    """A reader of the local file at ``path`` (mapped where it can be), which must be ``size`` bytes."""
    view = mapping.map_file(path) or read_local(path)
    if len(view) != size:
        raise ValueError(f"it holds {len(view)} bytes, not {size}")
    return lambda start, stop: view[start:stop]


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
    whys: dict[str, str] = {}
    for place in sources.places(files[0]) if len(files) == 1 else ["pool"]:
        try:
            data = _assemble(ranges, lambda r, at=place: sources.reader(r.file, at)(r.start, r.stop))
        except FileNotFoundError:
            whys[place] = "missing"
            continue
        except (OSError, ValueError, StoreError, IntegrityError) as e:
            whys[place] = f"unreadable ({e})"
            continue
        if len(data) == size and signing.digest(data, algorithm) == digest:
            if whys:
                sources.passed_over(files[0], place, whys)
            return data
        whys[place] = "checksum mismatch (the model file's bytes differ: damaged, or put there by someone else)"
    tensors = ", ".join(r.tensor for r in ranges[:3])
    said = "; ".join(f"{place.split(':')[0]}: {why}" for place, why in whys.items())
    return f"its model file {files[0][:12]} does not give tensor(s) {tensors}: {said}"


def read(
    store: Store,
    manifest: Manifest,
    digests: Iterable[str],
    progress: Progress | None = None,
    then: Callable[[str, Buffer], Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Read and verify referenced blobs ``digests``: the good bytes (or what ``then`` made of
    them) and, for the rest, why not. Sources passed over for others are kept for ``passed_over``."""
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
    _keep_passed(store, manifest, sources.lines())
    return good, bad


def _keep_passed(store: Store, manifest: Manifest, lines: list[str]) -> None:
    if not lines:
        return
    with _passed_lock:
        kept = _passed.setdefault((store.url, manifest.id), [])
        kept += [line for line in lines if line not in kept]
        while len(_passed) > PASSED_KEPT:
            del _passed[next(iter(_passed))]


def passed_over(store: Store, manifest: Manifest) -> list[str]:
    """What reads of ``manifest``'s referenced blobs from ``store`` passed over for another
    source that verified, one line per model file (each said once: taken, then forgotten)."""
    with _passed_lock:
        return _passed.pop((store.url, manifest.id), [])


def forget() -> None:
    """Forget every source passed over (a new process knows none)."""
    with _passed_lock:
        _passed.clear()
