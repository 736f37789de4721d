"""Local files mapped copy-on-write into memory, so a restore reads them without copying.

A blob read the ordinary way is copied from the page cache into a new buffer: twice the memory
while both exist, and most of a warm resume's time. A private mapping (``MAP_PRIVATE``) instead
shows the page cache's pages directly; tensors built on it share them until they are written
to, when the kernel copies just the pages written. The file descriptor is closed at once (the
mapping does not need it), and the mapping is removed when the last array built on it goes.

A mapped file must not shrink while mapped (reading past its new end is a ``SIGBUS``). Blobs are
never rewritten in place once complete (their names are their contents), and deleting a mapped
file is safe, so this holds for every blob of a checkpoint that verifies.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys

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


class _Mapping:
    """Owns one mapping; unmaps it when the buffer that refers to it is garbage collected."""

    def __init__(self, address: int, size: int) -> None:
        self.address, self.size = address, size

    def __del__(self) -> None:
        if _LIBC is not None:
            _LIBC.munmap(self.address, self.size)


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
    buffer._mapping = _Mapping(address, size)  # type: ignore[attr-defined]  # lives as long as any view
    return memoryview(buffer).cast("B")
