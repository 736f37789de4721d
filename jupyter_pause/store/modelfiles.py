"""Model files in the store's pool: a ``safetensors`` file's index, and its upload in the background.

A checkpoint references the tensors of a model file the kernel loaded instead of copying them
(``Manifest.references``). For that, the file must be in the pool, once per store, named by the
sha256 of its bytes (the name the Hugging Face cache gives its files too), and the checkpoint
must know each tensor's byte range and digest: the file's index (``FileIndex``), built once per
file by reading it (``index_file``), kept in the store beside the pool (``layout.file_index_key``).

``offer`` starts both in background threads as soon as a checkpoint sees a file: the index
first (a checkpoint waits for it, as it would for hashing those bytes), then the upload, which a
checkpoint that references the file waits for only before it commits (``ModelFile.uploaded``).
The index record is written after the whole file: its presence says the file is in the pool.
A file already there (another session uploaded it) is not uploaded again.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import StoreError
from . import signing
from .buffers import REMOTE_CHUNK
from .layout import file_index_key, pool_key
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

    def to_bytes(self) -> bytes:
        rows = [[t.name, t.start, t.stop, t.digest] for t in self.tensors]
        body = {"file": self.file, "size": self.size, "hash": self.algorithm, "tensors": rows}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, where: str) -> FileIndex:
        """Parse an index record; one that is not one raises ``StoreError`` naming ``where``."""
        try:
            body = json.loads(bytes(data))
            tensors = [Tensor(str(n), int(a), int(b), str(d)) for n, a, b, d in body["tensors"]]
            return cls(str(body["file"]), int(body["size"]), str(body["hash"]), tensors)
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


def upload(store: Store, path: str, index: FileIndex) -> None:
    """Put the file at ``path`` into ``store``'s pool unless it is there, then its index record.

    The bytes are hashed on their way; a file that changed since it was indexed is taken back
    out and refused (``StoreError``), so the pool never holds a file under another's digest.
    """
    record, key = file_index_key(index.file, index.algorithm), pool_key(index.file)
    held = store.sizes([record, key])
    if held[record] is not None and held[key] == index.size:
        return
    whole = hashlib.sha256()
    with open(path, "rb") as f:

        def chunks():  # type: ignore[no-untyped-def]
            while chunk := f.read(REMOTE_CHUNK):
                whole.update(chunk)
                yield chunk

        try:
            store.backend.write_stream(store.path(key), chunks(), lambda: whole.hexdigest() == index.file)
        except Exception as e:
            raise store._fail("upload the model file into", key, e) from e
    if whole.hexdigest() != index.file:
        raise StoreError(
            f"the model file {path} changed while it was uploaded (its sha256 is no longer {index.file[:12]}); "
            "its tensors are copied into checkpoints instead until it is read again"
        )
    store.write(record, index.to_bytes())


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
    #: was read to build the index; for an index the store held under the sha256 the file's
    #: name claims, once the file has been read (in the background) and found to have it.
    verified: Future[bool] = field(default_factory=_known_true)

    def holds_its_index(self) -> bool:
        """Whether ``verified`` says so by now (never waits)."""
        return self.verified.done() and self.verified.exception() is None and self.verified.result()


_indexing = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-index")
_uploading = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-upload")
_verifying = ThreadPoolExecutor(1, thread_name_prefix="jupyter-pause-verify")
_lock = threading.Lock()
#: Indexes of local files, by (the file's identity, algorithm): built once per file; with
#: whether it is one a store held under the sha256 the file's name claims.
_indexes: dict[tuple[object, ...], Future[tuple[FileIndex, bool]]] = {}
#: Whether a file holds the sha256 its name claims, by (the file's identity, sha256): read once.
_claims: dict[tuple[object, ...], Future[bool]] = {}
#: Uploads, by (store URL, file, algorithm): each once per store.
_uploads: dict[tuple[str, str, str], Future[None]] = {}


def _identity(path: str) -> tuple[object, ...]:
    stat = os.stat(path)
    return (os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _stored_index(store: Store, claimed: str, algorithm: str, size: int) -> FileIndex | None:
    """The index a store holds of file ``claimed`` (a sha256 the file's name gives), if it does."""
    key = file_index_key(claimed, algorithm)
    try:
        found = FileIndex.from_bytes(store.read(key), key)
    except FileNotFoundError:
        return None
    return found if found.size == size and found.file == claimed and found.algorithm == algorithm else None


def offer(store: Store, path: str, algorithm: str, claimed: str | None = None) -> Future[ModelFile]:
    """The model file at ``path``, indexed (in a thread) and on its way into ``store``'s pool.

    ``claimed``: the sha256 the file's name gives (a Hugging Face cache blob); when the store
    holds an index of that file already, that index is used at once, and the file is read
    once, in the background, to verify the claim (``ModelFile.verified``): until then, and if
    it is false, a tensor is taken for the file's only where its own bytes hash to the index's
    digest. Anything that fails here fails the returned future, and the file is offered afresh
    next time.
    """
    identity = (*_identity(path), algorithm)
    result: Future[ModelFile] = Future()

    def index() -> tuple[FileIndex, bool]:
        if claimed is not None:
            stored = _stored_index(store, claimed, algorithm, identity[3])  # type: ignore[arg-type]
            if stored is not None:
                return stored, True
        return index_file(path, algorithm), False

    with _lock:
        built = _indexes.get(identity)
        if built is None or (built.done() and built.exception() is not None):
            built = _indexes[identity] = _indexing.submit(index)

    def then(done: Future[tuple[FileIndex, bool]]) -> None:
        try:
            found, by_claim = done.result()
        except BaseException as e:
            result.set_exception(e)
            return
        verified = _verify(path, identity, found.file) if by_claim else _known_true()
        result.set_result(ModelFile(path, found, _upload(store, path, found), verified))

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
    """Forget every index, upload and verified claim (a new process knows none)."""
    with _lock:
        _indexes.clear()
        _uploads.clear()
        _claims.clear()
