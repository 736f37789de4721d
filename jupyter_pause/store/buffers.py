"""The buffers a store reads into: aligned, writable, filled without a second whole copy."""

from __future__ import annotations

import mmap
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


def buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes that starts at a multiple of ``ALIGNMENT``.

    A large one is anonymous memory without the transparent huge pages numpy asks for a large
    array: on a VM whose memory is backed on first touch, faulting huge pages in cost more than
    reading the bytes (a 1.4 GB resume from S3 took 7.2-8.4 s with them, 3.2-3.9 s without).
    """
    if size >= LARGE:
        return memoryview(np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8))
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
