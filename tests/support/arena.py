"""Memory a test hands a store to read into (``buffers.allocating``, ``Store.read_many(into=...)``),
standing in for the pinned memory a resume gives blobs bound for a GPU."""

from __future__ import annotations

import numpy as np


class Arena:
    """An allocator that hands out buffers of its own and remembers each one."""

    def __init__(self) -> None:
        self.given: list[np.ndarray] = []

    def __call__(self, size: int) -> memoryview:
        array = np.zeros(size, dtype=np.uint8)
        self.given.append(array)
        return memoryview(array)

    def owns(self, data: memoryview) -> bool:
        """Whether ``data`` lies in a buffer this arena handed out."""
        return any(np.shares_memory(np.frombuffer(data, dtype=np.uint8), a) for a in self.given)
