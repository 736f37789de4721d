"""Local files mapped copy-on-write into memory, so a restore reads them without copying,
and a later checkpoint can tell, without reading them, that they are still unchanged.

A blob read the ordinary way is copied from the page cache into a new buffer: twice the memory
while both exist, and most of a warm resume's time. A private mapping (``MAP_PRIVATE``) instead
shows the page cache's pages directly; tensors built on it share them until they are written
to, when the kernel copies just the pages written. The file descriptor is closed at once (the
mapping does not need it), and the mapping is removed when the last array built on it goes.

Each mapping of a verified blob remembers the blob's digest. While no page of it has been
written to, its memory still is that blob: on Linux, ``/proc/self/pagemap`` says of each page
whether it still maps the file (never written) or has become a private copy (written, or
swapped out after a write). ``unchanged_blob`` reads those flags (8 bytes per 4 KiB page), so a
checkpoint skips hashing tensors that a resume brought back and nothing has touched since, such
as frozen layers. Where the flags cannot be read, it answers None and the bytes are hashed.

A mapped file must not shrink while mapped (reading past its new end is a ``SIGBUS``). Blobs are
never rewritten in place once complete (their names are their contents), and deleting a mapped
file is safe, so this holds for every blob of a checkpoint that verifies.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Files smaller than this are read, not mapped: a mapping costs a few system calls.
MIN_BYTES = 1 << 20


def _libc() -> ctypes.CDLL | None:
    if sys.platform == "win32" or not hasattr(mmap, "MAP_PRIVATE"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()
_FAILED = ctypes.c_void_p(-1).value


_PAGE = mmap.PAGESIZE

#: Mappings alive now, by start address (weakly: an entry goes when its mapping does).
_live: weakref.WeakValueDictionary[int, _Mapping] = weakref.WeakValueDictionary()
_live_lock = threading.Lock()


class _Mapping:
    """Owns one mapping; unmaps it when the buffer that refers to it is garbage collected."""

    def __init__(self, address: int, size: int) -> None:
        self.address, self.size = address, size
        #: (digest algorithm, digest) of the blob this maps, once verified.
        self.blob: tuple[str, str] | None = None

    def __del__(self) -> None:
        libc = _LIBC  # None at interpreter exit, when module globals are cleared
        if libc is not None:
            libc.munmap(self.address, self.size)


def available() -> bool:
    """Whether this platform can map files here (Linux and macOS can)."""
    return _LIBC is not None


def map_file(path: str) -> memoryview | None:
    """A writable, private view of the file at ``path``; None where it cannot be mapped
    (too small, empty, or the platform or filesystem refuses), and the caller reads instead."""
    if _LIBC is None:
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if size < MIN_BYTES:
            return None
        address = _LIBC.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE, fd, 0)
    finally:
        os.close(fd)
    if address is None or address == _FAILED:
        return None
    buffer = (ctypes.c_ubyte * size).from_address(address)
    owner = _Mapping(address, size)
    buffer._mapping = owner  # type: ignore[attr-defined]  # lives as long as any view
    with _live_lock:
        _live[address] = owner
    return memoryview(buffer).cast("B")


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def remember_blob(view: Any, algorithm: str, digest: str) -> None:
    """Note that ``view`` (from ``map_file``) holds the verified blob ``digest``."""
    if not isinstance(view, memoryview) or not len(view):
        return
    with _live_lock:
        owner = _live.get(_address(view))
        if owner is not None and owner.size == len(view):
            owner.blob = (algorithm, digest)


@contextlib.contextmanager
def pagemap() -> Iterator[int | None]:
    """This process's page flags (``/proc/self/pagemap``) held open for a batch of ``unwritten``
    calls: one open for a checkpoint's hundreds of mapped arrays, not one each (the flags of 1.6 GB
    took 14.5 ms, not 18.6); None where it cannot be opened."""
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def unwritten(address: int, size: int, flags: int | None = None) -> bool | None:
    """Whether no page of ``[address, address + size)`` was written since it was mapped from
    its file; None where the page flags cannot be read. ``flags``: ``pagemap()``'s descriptor."""
    if flags is None:
        with pagemap() as opened:
            return None if opened is None else unwritten(address, size, opened)
    first, last = address // _PAGE, (address + size - 1) // _PAGE
    length = (last - first + 1) * 8
    try:
        raw = os.pread(flags, length, first * 8)
    except OSError:
        return None
    if len(raw) != length:
        return None
    bits = np.frombuffer(raw, dtype="<u8") >> np.uint64(61)  # bits 2..0: present, swapped, file page
    swapped = bits & np.uint64(2)
    private = bits & np.uint64(4) & ~(bits << np.uint64(2))  # present, and not the file's page
    return not bool(np.any(swapped | private))


def unchanged_blob(address: int, size: int, algorithm: str, flags: int | None = None) -> str | None:
    """The digest of the mapped blob whose memory is exactly ``[address, address + size)``,
    provided none of it was written since; None otherwise (the caller hashes the bytes).
    ``flags``: ``pagemap()``'s descriptor, for a batch."""
    with _live_lock:
        owner = _live.get(address)
        blob = owner.blob if owner is not None and owner.size == size else None
    if blob is None or blob[0] != algorithm:
        return None
    return blob[1] if unwritten(address, size, flags) else None


@dataclass(frozen=True)
class FileMapping:
    """One file mapped into this process (a line of ``/proc/self/maps``)."""

    start: int
    end: int
    offset: int  # where in the file the mapping starts
    device: int
    inode: int
    path: str


@dataclass(frozen=True)
class ProcessMaps:
    """What ``/proc/self/maps`` says of this process at one moment."""

    files: list[FileMapping]  # the files mapped into it
    #: Its private anonymous memory (no file, not shared: what allocators hand out), as
    #: ``[start, end)`` ranges in order, adjacent ones merged.
    anonymous: list[tuple[int, int]]


def process_maps() -> ProcessMaps:
    """One reading of ``/proc/self/maps``; nothing where ``/proc`` is absent (not Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return ProcessMaps([], [])
    files: list[FileMapping] = []
    anonymous: list[tuple[int, int]] = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        if parts[4] == "0":  # anonymous memory, the heap, the stack, the kernel's own pages
            named = parts[5].strip() if len(parts) > 5 else ""
            if parts[1][3] == "p" and not named.startswith("[v"):  # not shared, not [vvar]/[vdso]
                if anonymous and anonymous[-1][1] == start:
                    anonymous[-1] = (anonymous[-1][0], end)
                else:
                    anonymous.append((start, end))
            continue
        if len(parts) < 6:
            continue
        major, minor = (int(x, 16) for x in parts[3].split(":"))
        files.append(FileMapping(start, end, int(parts[2], 16), os.makedev(major, minor), int(parts[4]), parts[5]))
    return ProcessMaps(files, anonymous)


def file_mappings() -> list[FileMapping]:
    """The files mapped into this process now; none where ``/proc`` is absent (not Linux)."""
    return process_maps().files
