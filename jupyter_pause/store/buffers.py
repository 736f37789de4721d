"""The buffers a store reads into: aligned, writable, filled without a second whole copy."""

from __future__ import annotations

import contextlib
import mmap
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

#: Buffers that blobs are read into start at a multiple of this, as torch's own CPU allocations
#: do, so arrays built on them are aligned as the originals were (vectorised kernels may round
#: differently on differently aligned data, and a model check must reproduce bit for bit).
ALIGNMENT = 64

#: Remote stores: bytes handed to (or taken from) a file object at once, and its part size.
#: The file object uploads a part whenever its buffer fills, so a large blob is never held
#: twice in memory: each blob in flight costs at most about one part and one chunk extra.
REMOTE_CHUNK = 8 << 20
REMOTE_BLOCK = 16 << 20  # S3 parts must be at least 5 MiB

#: Bytes read from a store: a buffer of their own, or a private mapping of a local file.
Buffer = memoryview


#: Buffers at least this large are anonymous memory of their own (page-aligned).
LARGE = 1 << 20

#: How such memory is mapped where the platform says (``anonymous``): private to this process
#: (``mmap``'s default, a shared mapping, is shared memory the kernel pages in more slowly), and
#: faulted in whole as it is mapped (Linux's ``MAP_POPULATE``), not a fault per page as bytes arrive.
LARGE_FLAGS = (
    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0) if hasattr(mmap, "MAP_PRIVATE") else 0
)


def anonymous(size: int) -> mmap.mmap:
    """``size`` bytes of page-aligned memory of this process's own (``LARGE_FLAGS`` where there are any)."""
    return mmap.mmap(-1, size, flags=LARGE_FLAGS) if LARGE_FLAGS else mmap.mmap(-1, size)


#: Where this thread's buffers come from instead, inside ``allocating``.
_source = threading.local()


@contextlib.contextmanager
def allocating(allocate: Callable[[int], memoryview] | None) -> Iterator[None]:
    """Inside the block, every buffer this thread takes (``buffer``) is ``allocate(size)``: what
    a store reads then lands in memory of the caller's choosing (page-locked host memory for a
    blob bound for a GPU, ``serialize.pinned``). ``allocate`` returns a writable, aligned buffer
    of exactly ``size`` bytes. None changes nothing."""
    previous = getattr(_source, "allocate", None)
    _source.allocate = allocate if allocate is not None else previous
    try:
        yield
    finally:
        _source.allocate = previous


def buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes that starts at a multiple of ``ALIGNMENT``: from the
    thread's own source inside ``allocating``, else ``ordinary``."""
    allocate = getattr(_source, "allocate", None)
    return ordinary(size) if allocate is None else allocate(size)


def ordinary(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes of this process's own memory, starting at a multiple
    of ``ALIGNMENT``.

    A large one is anonymous memory without the transparent huge pages numpy asks for a large
    array: on a VM whose memory is backed on first touch, faulting huge pages in cost more than
    reading the bytes (a 1.4 GB resume from S3 took 7.2-8.4 s with them, 3.2-3.9 s without).
    It is mapped private and populated (``LARGE_FLAGS``): 1 GB of it cost 0.31 CPU-seconds where
    a shared mapping faulted in page by page cost 0.51, and a cold 1 GB read from S3 in 1.64-1.77 s
    rather than 1.87-2.01 s. Every byte of it is about to be written, so none is taken for nothing.
    """
    if size >= LARGE:
        return memoryview(np.frombuffer(anonymous(size), dtype=np.uint8))
    raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
    start = -raw.__array_interface__["data"][0] % ALIGNMENT
    return memoryview(raw[start : start + size])


def aligned_copy(data: bytes) -> memoryview:
    """``data`` in a buffer of its own (aligned and writable, as every buffer a store reads is)."""
    buf = buffer(len(data))
    buf[:] = data
    return buf


def read_remote(f: Any) -> memoryview:
    """All of a remote file object into one buffer, a chunk at a time (no second whole copy)."""
    size = getattr(f, "size", None)
    if not isinstance(size, int):
        return aligned_copy(f.read())
    buf = buffer(size)
    view, done = buf, 0
    while done < size:
        chunk = f.read(min(REMOTE_CHUNK, size - done))
        if not chunk:
            break
        view[done : done + len(chunk)] = chunk
        done += len(chunk)
    return buf if done == size else buf[:done]


def read_local(path: str) -> memoryview:
    """All of a local file into one buffer, read straight into it."""
    import os

    size = os.path.getsize(path)
    buf = buffer(size)
    with open(path, "rb", buffering=0) as f:
        view, done = buf, 0
        while done < size:
            n = f.readinto(view[done:])
            if not n:
                break
            done += n
    return buf if done == size else buf[:done]
