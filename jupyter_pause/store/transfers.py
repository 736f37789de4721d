"""A transfer's progress: bytes done so far, counted across the threads moving them."""

from __future__ import annotations

import threading
from typing import Callable

#: Called with the bytes done so far.
Progress = Callable[[int], None]


class Counter:
    """Bytes done so far across worker threads, reported to an optional callback."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress
        self.total = 0
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        if self.progress is None:
            return
        with self.lock:
            self.total += n
            total = self.total
        self.progress(total)
