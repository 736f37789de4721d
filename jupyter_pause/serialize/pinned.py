"""Blobs bound for a GPU: read into page-locked host memory, copied to their device without waiting.

A resume reads each blob on a thread of its own and moves one that holds only tensors of one GPU
to that GPU as soon as it is verified (``session.restore``). From ordinary (pageable) memory CUDA
copies through a staging buffer of its own, and the reading thread waits for the copy to end.
Here the store reads such a blob straight into page-locked memory (``buffers.allocating``, with
buffers from torch's caching host allocator), and its copy is queued on the device without
waiting: the thread goes on to its next blob while the bus moves this one.

Each pinned buffer is kept until a CUDA event recorded after its copy says the copy is done,
then handed back to the allocator, which gives it to a later blob; so the pinned memory in use is
about the blobs in flight. ``finish`` waits for the last copies and returns the pinned memory to
the system: a kernel does not keep page-locked memory it no longer needs.

Where this process cannot pin (torch without CUDA, no GPU visible, or the pinned memory limit
reached, as in a container with a small ``ulimit -l``) blobs are read and copied as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..store.buffers import Buffer, ordinary
from .arrays import to_device

log = logging.getLogger(__name__)

#: Bytes this process's resumes read into pinned memory, and copied from it without waiting.
TOTALS = {"pinned": 0, "queued": 0}
_totals_lock = threading.Lock()


class Uploads:
    """The GPU-bound blobs of one restore (``places``: blob key -> device) and their copies."""

    def __init__(self, places: dict[str, str]) -> None:
        import torch

        self._torch = torch
        self.places = places
        self.pinning = torch.cuda.is_available()
        self._lock = threading.Lock()
        #: Pinned buffers read into and not copied yet: data address -> (blob key, tensor).
        self._held: dict[int, tuple[str, Any]] = {}
        #: Copies queued on a device: (event recorded after it, the pinned tensor it reads).
        self._pending: list[tuple[Any, Any]] = []
        #: Bytes read into pinned memory, and bytes copied from it without waiting.
        self.pinned_bytes = 0
        self.queued_bytes = 0

    def into(self, key: str) -> Callable[[int], Buffer] | None:
        """The allocator blob ``key`` is read with (``Store.read_many``'s ``into``): pinned
        memory for a blob bound for a GPU, where this process can pin; else None."""
        if not self.pinning or key not in self.places:
            return None
        return lambda size: self._pinned(key, size)

    def _pinned(self, key: str, size: int) -> Buffer:
        torch = self._torch
        try:
            host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        except RuntimeError as e:  # pinned memory is limited (containers, ulimit -l): read and copy as before
            with self._lock:  # blobs are read on several threads: the first refusal says so
                first, self.pinning = self.pinning, False
            if first:
                log.warning(
                    "this resume reads its GPU tensors into ordinary memory and copies them as it goes "
                    "(slower): the process could not page-lock %d bytes (%s); raise its locked-memory "
                    "limit (`ulimit -l`, the container's memlock) to let it",
                    size,
                    str(e).splitlines()[0] if str(e) else type(e).__name__,
                )
            return ordinary(size)
        if size:
            with self._lock:
                self._held[host.data_ptr()] = (key, host)
                self.pinned_bytes += size
        return memoryview(host.numpy())  # the array, and so this view, keeps ``host`` alive

    def place(self, key: str, data: Buffer) -> Any:
        """``data`` (verified) on the device ``key`` is bound for; ``data`` itself for any other."""
        device = self.places.get(key)
        if device is None:
            return data
        torch = self._torch
        if not len(data):
            return torch.empty(0, dtype=torch.uint8, device=device)
        host = torch.frombuffer(data, dtype=torch.uint8)
        with self._lock:
            held = self._held.pop(host.data_ptr(), None)
            for address in [a for a, (k, _) in self._held.items() if k == key]:
                del self._held[address]  # read into, but not what came out (the sealed bytes of an encrypted blob)
        if held is None:
            return to_device(data, device)
        pinned = held[1][: len(data)]
        out = torch.empty(len(data), dtype=torch.uint8, device=device)
        out.copy_(pinned, non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(out.device))
        with self._lock:
            self._pending = [(e, t) for e, t in self._pending if not e.query()] + [(done, held[1])]
            self.queued_bytes += len(data)
        return out

    def finish(self) -> None:
        """Wait for every queued copy, let go of the pinned buffers and return the allocator's
        cached pinned memory to the system."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._held.clear()
        for done, _ in pending:
            done.synchronize()
        pending.clear()
        with _totals_lock:
            TOTALS["pinned"] += self.pinned_bytes
            TOTALS["queued"] += self.queued_bytes
        if self.pinned_bytes:
            empty = getattr(self._torch._C, "_host_emptyCache", None)
            if empty is not None:
                empty()
