"""Host memory that ``--async`` checkpoints copy live arrays into, kept from one to the next.

Fresh memory is slow to touch the first time (the operating system hands it out zeroed, page by
page): copying 1.5 GiB into new memory takes several times as long as into memory touched
before. So the buffer of one background checkpoint is kept and reused by the next, which may
start only once the one before has committed or failed (``background.one_at_a_time``).
``release()`` gives the memory back.
"""

from __future__ import annotations

import threading

import numpy as np

_kept: np.ndarray | None = None
_lock = threading.Lock()


def take(nbytes: int) -> np.ndarray:
    """A byte array of ``nbytes``: a view of the kept buffer when it is large enough."""
    global _kept
    with _lock:
        if _kept is None or _kept.nbytes < nbytes:
            _kept = None  # let the old one go before the new one is allocated
            _kept = np.empty(nbytes, dtype=np.uint8)
        return _kept[:nbytes]


def kept_bytes() -> int:
    """Bytes held for the next background checkpoint."""
    return 0 if _kept is None else _kept.nbytes


def release() -> None:
    """Give the kept buffer back (the next ``--async`` checkpoint allocates a new one)."""
    global _kept
    with _lock:
        _kept = None
