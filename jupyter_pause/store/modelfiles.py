"""Model files in the store's pool: a ``safetensors`` file's index, and its upload in the background.

A checkpoint references the tensors of a model file the kernel loaded instead of copying them
(``Manifest.references``). For that, the file must be in the pool, once per store, and the
checkpoint must know each tensor's byte range and digest: the file's index (``FileIndex``),
built once per file by reading it (``index_file``), kept in the store beside the pool.

Nothing is taken from the store because of its name. The file and its index are named through
``store.names``: with a key, by an HMAC of the file's sha256 under the user's key, which no one
without the key can predict or plant; without one, by the sha256 itself, which anyone can
compute. An index record is sealed with the user's key and bound to the file it describes
(``signing.FILE_INDEX``): one that does not open is never used, and the file is indexed again
from its own bytes; without a key no stored index is used at all. An upload is skipped only
where the object found is the user's own (``in_store``): keyed, or, without a key, its bytes
hashed there to the file's sha256; a copy planted under the file's public name is overwritten.

``offer`` starts both in background threads as soon as a checkpoint sees a file: the index
first (a checkpoint waits for it, as it would for hashing those bytes), then the upload, which a
checkpoint that references the file waits for only before it commits (``ModelFile.uploaded``).
The index record is written after the whole file: its presence says the file is in the pool.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..errors import IntegrityError, StoreError
from . import seals, signing
from .buffers import REMOTE_CHUNK
from .signing import FILE_INDEX, Keys
from .storage import Store

#: Bytes hashed at once while reading a model file.
CHUNK = 64 << 20

#: The suffix of the files indexed.
SUFFIX = ".safetensors"


@dataclass(frozen=True)
class Tensor:
    """One tensor of a model file: its name, its bytes ``[start, stop)`` in the file, and their digest."""

    name: str
    start: int
    stop: int
    digest: str


@dataclass
class FileIndex:
    """Every tensor of one model file, digested with ``algorithm``; ``file`` is the sha256 of its bytes."""

    file: str
    size: int
    algorithm: str
    tensors: list[Tensor] = field(default_factory=list)

    def to_record(self, keys: Keys) -> bytes:
        """The index record kept in the store: JSON, sealed for its file when ``keys`` has a key."""
        rows = [[t.name, t.start, t.stop, t.digest] for t in self.tensors]
        body = {"file": self.file, "size": self.size, "hash": self.algorithm, "tensors": rows}
        return seals.sealed_json(body, FILE_INDEX, index_place(self.file, self.algorithm), keys)

    @classmethod
    def from_record(cls, record: Mapping[str, Any], where: str) -> FileIndex:
        """An index from its record's JSON; one that is not one raises ``StoreError`` naming ``where``."""
        try:
            tensors = [Tensor(str(n), int(a), int(b), str(d)) for n, a, b, d in record["tensors"]]
            return cls(str(record["file"]), int(record["size"]), str(record["hash"]), tensors)
        except (ValueError, KeyError, TypeError) as e:
            raise StoreError(f"the model file index {where} is not one ({e}); delete it and checkpoint again") from e


def tensor_ranges(path: str) -> list[tuple[str, int, int]]:
    """Each tensor of the ``safetensors`` file at ``path``: name and absolute byte range."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path} is too short for a safetensors file")
        (length,) = struct.unpack("<Q", head)
        if length > 100 << 20:
            raise ValueError(f"{path} declares a {length}-byte header: not a safetensors file")
        header = json.loads(f.read(length))
    base = 8 + length
    ranges = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, stop = entry["data_offsets"]
        ranges.append((name, base + int(start), base + int(stop)))
    return sorted(ranges, key=lambda r: r[1])


def index_file(path: str, algorithm: str) -> FileIndex:
    """Read the model file at ``path`` once: the sha256 of all of it and the digest of each tensor."""
    ranges = tensor_ranges(path)
    size = os.path.getsize(path)
    whole = hashlib.sha256()
    tensors = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            for start in range(0, size, CHUNK):
                whole.update(view[start : start + CHUNK])
            for name, start, stop in ranges:
                tensors.append(Tensor(name, start, stop, signing.digest(view[start:stop], algorithm)))
        finally:
            view.release()
    return FileIndex(whole.hexdigest(), size, algorithm, tensors)


def index_place(sha256: str, algorithm: str) -> dict[str, str | None]:
    """Where the index of model file ``sha256`` (digests in ``algorithm``) belongs, as its seal
    covers it: the file, the algorithm and the Hub user."""
    return {"user": seals.this_user(), "file": sha256, "hash": algorithm}


def stored_index(store: Store, sha256: str, algorithm: str, size: int) -> tuple[FileIndex | None, str]:
    """The index ``store`` holds of model file ``sha256`` (of ``size`` bytes), when it may be used;
    else None and why not ("" when there is none).

    Only an index sealed with the store's keys, for this file, is used: anyone holding the
    store's credential could have written any other one. Without a key none is used.
    """
    if store.keys is None:
        return None, ""
    key = store.names.file_index_key(sha256, algorithm)
    try:
        record = json.loads(bytes(store.read(key)))
    except FileNotFoundError:
        return None, ""
    except (StoreError, IntegrityError) as e:
        return None, f"it cannot be read ({e})"
    except ValueError:
        return None, "it is not an index record"
    if not isinstance(record, dict):
        return None, "it is not an index record"
    why = seals.opened_json(record, FILE_INDEX, index_place(sha256, algorithm), store.keys)
    if why is not None:
        return None, why
    try:
        found = FileIndex.from_record(record, key)
    except StoreError as e:
        return None, str(e)
    if found.file != sha256 or found.size != size or found.algorithm != algorithm:
        return None, "it describes another file"
    return found, ""


def upload(store: Store, path: str, index: FileIndex) -> None:
    """Put the file at ``path`` into ``store``'s pool unless it is there, then its sealed index record.

    The file counts as there only where the object found is the user's own (``in_store``);
    else it is written, over whatever lies under its name. The bytes are hashed on their way; a
    file that changed since it was indexed is taken back out and refused (``StoreError``), so
    the pool never holds a file under another's digest.
    """
    key = store.names.pool_key(index.file)
    record = store.names.file_index_key(index.file, index.algorithm)
    if in_store(store, index):
        return
    whole = hashlib.sha256()
    with open(path, "rb") as f:

        def chunks():  # type: ignore[no-untyped-def]
            while chunk := f.read(REMOTE_CHUNK):
                whole.update(chunk)
                yield chunk

        store.write_stream(key, chunks(), lambda: whole.hexdigest() == index.file)
    if whole.hexdigest() != index.file:
        raise StoreError(
            f"the model file {path} changed while it was uploaded (its sha256 is no longer {index.file[:12]}); "
            "its tensors are copied into checkpoints instead until it is read again"
        )
    store.write(record, index.to_record(store.keys))
    with _lock:
        _held.add((store.url, key))


def in_store(store: Store, index: FileIndex) -> bool:
    """Whether ``store`` holds the model file ``index`` describes and an index record of it, as
    the user's own: written or verified by this process; with a key, under the keyed name (which
    no one without the key can predict) with an index that opens; without one, its bytes hashed
    there to the file's sha256. A copy planted under the file's public name is never taken."""
    key = store.names.pool_key(index.file)
    record = store.names.file_index_key(index.file, index.algorithm)
    held = store.sizes([record, key])
    if held[key] != index.size or held[record] is None:
        return False
    with _lock:
        if (store.url, key) in _held:
            return True
    if store.keys is not None:
        ours = stored_index(store, index.file, index.algorithm, index.size)[0] is not None
    else:
        ours = stored_sha256(store, key, index.size) == index.file
    if ours:
        with _lock:
            _held.add((store.url, key))
    return ours


def stored_sha256(store: Store, key: str, size: int) -> str | None:
    """The sha256 of the ``size`` bytes of the object at ``key``, read a part at a time; None
    when it is gone or cannot be read."""
    whole = hashlib.sha256()
    try:
        for start in range(0, size, CHUNK):
            whole.update(store.read_range(key, start, min(size, start + CHUNK)))
    except (FileNotFoundError, StoreError, IntegrityError):
        return None
    return whole.hexdigest()


def _known_true() -> Future[bool]:
    done: Future[bool] = Future()
    done.set_result(True)
    return done


@dataclass
class ModelFile:
    """A model file a checkpoint may reference: where it was read, its index, and its upload
    into one store (done once the file and its index record are there)."""

    path: str
    index: FileIndex
    uploaded: Future[None]
    #: Whether the file at ``path`` holds the bytes ``index`` describes: true at once where it
    #: was read to build the index; for an index the store held (sealed by the user) under the
    #: sha256 the file's name claims, once the file has been read (in the background) and found
    #: to have it.
    verified: Future[bool] = field(default_factory=_known_true)
    #: What the checkpoint should say of this file: an index in the store that was not used, and why.
    notes: list[str] = field(default_factory=list)

    def holds_its_index(self) -> bool:
        """Whether ``verified`` says so by now (never waits)."""
        return self.verified.done() and self.verified.exception() is None and self.verified.result()


#: A file's index, whether it is one the store held (under the sha256 the file's name claims),
#: and what to say of a stored index passed over.
_Indexed = tuple[FileIndex, bool, list[str]]

_indexing = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-index")
_uploading = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-upload")
_verifying = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-verify")
_lock = threading.Lock()
#: Indexes of local files, by (the file's identity, algorithm): built once per file.
_indexes: dict[tuple[object, ...], Future[_Indexed]] = {}
#: Whether a file holds the sha256 its name claims, by (the file's identity, sha256): read once.
_claims: dict[tuple[object, ...], Future[bool]] = {}
#: Uploads, by (store URL, file, algorithm): each once per store.
_uploads: dict[tuple[str, str, str], Future[None]] = {}
#: Pool objects this process wrote or verified as the user's own, by (store URL, key).
_held: set[tuple[str, str]] = set()


def _identity(path: str) -> tuple[object, ...]:
    stat = os.stat(path)
    return (os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _index(store: Store, path: str, algorithm: str, claimed: str | None, size: int) -> _Indexed:
    """The index of the file at ``path``: the store's, where one sealed by the user describes the
    file its name claims; else built from the file's own bytes."""
    notes = []
    if claimed is not None:
        stored, why = stored_index(store, claimed, algorithm, size)
        if stored is not None:
            return stored, True, []
        if why:
            notes.append(
                f"the store's index of model file {path} ({claimed[:12]}) was not used: {why}; "
                "the file was indexed again from its own bytes"
            )
    return index_file(path, algorithm), False, notes


def offer(store: Store, path: str, algorithm: str, claimed: str | None = None) -> Future[ModelFile]:
    """The model file at ``path``, indexed (in a thread) and on its way into ``store``'s pool.

    ``claimed``: the sha256 the file's name gives (a Hugging Face cache blob); when the store
    holds an index of that file sealed by the user (``stored_index``), that index is used at
    once, and the file is read once, in the background, to verify the claim
    (``ModelFile.verified``): until then, and if it is false, a tensor is taken for the file's
    only where its own bytes hash to the index's digest. Anything that fails here fails the
    returned future, and the file is offered afresh next time.
    """
    identity = (*_identity(path), algorithm)
    result: Future[ModelFile] = Future()
    with _lock:
        built = _indexes.get(identity)
        fresh = built is None or (built.done() and built.exception() is not None)
        if fresh:
            built = _indexes[identity] = _indexing.submit(_index, store, path, algorithm, claimed, identity[3])
    assert built is not None

    def then(done: Future[_Indexed]) -> None:
        try:
            found, by_claim, notes = done.result()
        except BaseException as e:
            result.set_exception(e)
            return
        verified = _verify(path, identity, found.file) if by_claim else _known_true()
        uploaded = _upload(store, path, found)
        result.set_result(ModelFile(path, found, uploaded, verified, notes if fresh else []))

    built.add_done_callback(then)
    return result


def _upload(store: Store, path: str, index: FileIndex) -> Future[None]:
    """The upload of ``path`` into ``store``: the one on its way, else a new one (which only
    looks, when the file is there already: a cleanup may have removed it since)."""
    key = (store.url, index.file, index.algorithm)
    with _lock:
        found = _uploads.get(key)
        if found is None or found.done():
            found = _uploads[key] = _uploading.submit(upload, store, path, index)
        return found


def _sha256(path: str) -> str:
    whole = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            whole.update(chunk)
    return whole.hexdigest()


def _verify(path: str, identity: tuple[object, ...], claimed: str) -> Future[bool]:
    """Whether the file at ``path`` has the sha256 ``claimed``: read once per file, in a thread."""
    key = (*identity, claimed)
    with _lock:
        found = _claims.get(key)
        if found is None or (found.done() and found.exception() is not None):
            found = _claims[key] = _verifying.submit(lambda: _sha256(path) == claimed)
        return found


def forget() -> None:
    """Forget every index, upload, verified claim and object held (a new process knows none)."""
    with _lock:
        _indexes.clear()
        _uploads.clear()
        _claims.clear()
        _held.clear()
