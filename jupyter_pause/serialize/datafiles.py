"""Values that read a file by path, saved with the file's content: the file travels with the checkpoint.

``datasets`` pickles a memory-mapped table (what ``load_dataset`` and ``.map()`` give, and the
``ConcatenationTable`` of several) as the path of its Arrow file and the transforms to replay:
on another node that path is gone, and the resume failed. While a checkpoint pickles
(``collecting``), such a table is saved as a ``DataFile``: the digest of the file's bytes, its
size and path, and the same transforms; the file's bytes become one blob of the checkpoint
(``Files.found``). A NumPy memmap opened read-only (mode ``r``) goes the same way.

A file is taken as it is on disk (mapped, never read into memory) where it cannot change under
the checkpoint: in ``datasets``' cache (which never rewrites a file in place), in the folder
staged files go to, or not writable here. A writable file elsewhere is copied whole at that
moment (a consistent copy). A file over the size limit, or one that cannot be read, is left to
the library's own pickling (it comes back only where its path exists) and named
(``Files.unsaved``); so is a memmap open for writing, saved as a copy of its values.

On load, ``DataFile`` becomes a local path through the resolver of the restore (``resolving``):
the file where it was, when that path holds the same bytes, else a verified copy from the pool.
"""

from __future__ import annotations

import contextlib
import contextvars
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..store import datafiles as stored
from . import byteorder

#: What finds a file on load: (digest, size, path where it was read, algorithm) -> a local path.
Resolver = Callable[[str, int, str, str], str]


@dataclass(frozen=True)
class Found:
    """One file a checkpoint keeps: its digest, size, where it was read, how, and its bytes."""

    digest: str
    size: int
    path: str
    how: str  # "mapped" (as it is on disk) or "copied" (read whole: it may change)
    data: Any = field(compare=False, repr=False)


@dataclass
class Files:
    """The files one checkpoint's pickling met: kept (by digest), and not kept (path -> why)."""

    algorithm: str
    limit: int
    #: Folders whose files never change in place (``datasets``' cache, the staging folder).
    fixed: tuple[str, ...] = ()
    found: dict[str, Found] = field(default_factory=dict)
    unsaved: dict[str, str] = field(default_factory=dict)
    _by_identity: dict[tuple[object, ...], Found] = field(default_factory=dict)

    def keep(self, path: str) -> Found | None:
        """The file at ``path`` as the checkpoint keeps it; None (and why, in ``unsaved``) when it is not kept."""
        try:
            seen = stored.identity(path)
            if seen in self._by_identity:
                return self._by_identity[seen]
            size = int(seen[3])  # type: ignore[call-overload]
            if size > self.limit:
                self.unsaved[path] = (
                    f"{size:,} bytes, over the limit of {self.limit:,} (PauseConfig.data_files_max): not copied "
                    "into the checkpoint; it comes back only where that path exists"
                )
                return None
            found = self._read(path, size)
        except OSError as e:
            self.unsaved[path] = f"cannot be read ({e}); it comes back only where that path exists"
            return None
        self._by_identity[seen] = self.found.setdefault(found.digest, found)
        return found

    def _read(self, path: str, size: int) -> Found:
        if _fixed(path, self.fixed):
            data: Any = _mapped(path) if size else b""
            return Found(stored.file_digest(path, self.algorithm), size, path, "mapped", data)
        with open(path, "rb") as f:  # it may change: what it holds now, whole
            data = f.read()
        return Found(stored.signing.digest(data, self.algorithm), len(data), path, "copied", data)


def _mapped(path: str) -> mmap.mmap:
    with open(path, "rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _fixed(path: str, folders: tuple[str, ...]) -> bool:
    """Whether the file at ``path`` cannot change under a checkpoint (see the module's docstring)."""
    real = os.path.realpath(path)
    if any(os.path.commonpath([real, folder]) == folder for folder in folders):
        return True
    return not os.access(path, os.W_OK)


_files: contextvars.ContextVar[Files | None] = contextvars.ContextVar("jupyter_pause_data_files", default=None)
_resolver: contextvars.ContextVar[Resolver | None] = contextvars.ContextVar("jupyter_pause_resolver", default=None)


@contextlib.contextmanager
def collecting(files: Files) -> Iterator[Files]:
    """Within this block, values reading files by path are pickled with the file kept in ``files``."""
    token = _files.set(files)
    try:
        yield files
    finally:
        _files.reset(token)


@contextlib.contextmanager
def resolving(resolver: Resolver) -> Iterator[None]:
    """Within this block, a loaded ``DataFile`` becomes the path ``resolver`` gives."""
    token = _resolver.set(resolver)
    try:
        yield
    finally:
        _resolver.reset(token)


def in_place(digest: str, size: int, path: str, algorithm: str) -> str:
    """The resolver outside a restore: the file where it was read, if it holds those bytes."""
    if stored.holds(path, digest, size, algorithm):
        return path
    raise FileNotFoundError(f"data file {path} ({digest[:12]}) is not here with the bytes the checkpoint kept")


def local_path(digest: str, size: int, path: str, algorithm: str) -> str:
    """Named in pickle streams: the local path of the file ``digest`` (see ``resolving``)."""
    return (_resolver.get() or in_place)(digest, size, path, algorithm)


class DataFile:
    """A file kept by its content: pickled as the call that finds it on load (``local_path``)."""

    def __init__(self, found: Found, algorithm: str) -> None:
        self.found, self.algorithm = found, algorithm

    def __reduce__(self) -> tuple[Any, ...]:
        f = self.found
        return (local_path, (f.digest, f.size, f.path, self.algorithm))


def make_table(kind: type, path: str, replays: Any) -> Any:
    """A ``datasets`` memory-mapped table of ``kind`` over the file at ``path``, as ``datasets`` loads it."""
    table = kind.__new__(kind)
    table.__setstate__({"path": path, "replays": replays})
    return table


def reduce_table(table: Any) -> Any:
    """A memory-mapped table with its file kept (see the module's docstring); as ``datasets``
    pickles it outside a checkpoint, or where the file is not kept."""
    files = _files.get()
    if files is None:
        return NotImplemented
    found = files.keep(table.path)
    if found is None:
        return NotImplemented
    return (make_table, (type(table), DataFile(found, files.algorithm), table.replays))


def make_memmap(path: str, dtype: Any, offset: int, shape: tuple[int, ...], order: str) -> Any:
    """A read-only NumPy memmap of the file at ``path``."""
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)


def reduce_memmap(array: Any) -> Any:
    """A read-only memmap of a whole mapping with its file kept; any other memmap as a copy of its
    values, as before (one open for writing is named: it no longer writes to the file)."""
    files = _files.get()
    named, mode = getattr(array, "filename", None), getattr(array, "mode", None)
    mapping = getattr(array, "_mmap", None)
    if files is None or not named or mapping is None or array.base is not mapping:
        return byteorder.reduce_in_byte_order(array)
    path = os.path.abspath(os.fspath(named))  # numpy keeps a Path as it was given
    if mode != "r":
        files.unsaved[path] = (
            f"a NumPy memmap open for writing (mode {mode!r}): saved as a copy of its values; it comes back as "
            "an array in memory, no longer written to that file"
        )
        return byteorder.reduce_in_byte_order(array)
    found = files.keep(path)
    if found is None:
        return byteorder.reduce_in_byte_order(array)
    order = "F" if array.flags.f_contiguous and not array.flags.c_contiguous else "C"
    args = (DataFile(found, files.algorithm), array.dtype, array.offset, array.shape, order)
    return (make_memmap, args)


#: Reducers by the qualified name of the class they handle (and its subclasses).
BY_NAME: dict[str, Callable[[Any], Any]] = {
    "datasets.table.MemoryMappedTable": reduce_table,
    "numpy.memmap": reduce_memmap,
}
