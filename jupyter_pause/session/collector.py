"""Python's cyclic garbage collector, held off while a resume reads and rebuilds a checkpoint.

A resume in a new kernel imports torch and the restore's own modules and builds the checkpoint's
objects: hundreds of thousands of new objects, nearly all of which live on. Each time enough of
them have accumulated the collector runs, and once torch is imported a full collection walks all
of torch's objects too: about 50 ms each here, three of them in a 150 MB resume (0.15-0.24 s of
collections in all), every one with the GIL held, so that the reads and the import on the other
threads wait as well. Reading and unpickling make almost no cyclic garbage: held off until the
resume is done, the collector runs again on its own schedule after it. The user's own code a
resume runs (replayed cells, ``after_resume`` hooks) runs with the collector on
(``running_user_code``).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside the block (nested blocks, and blocks on several threads,
    end it once the last one ends); the collector is on again after it if it was on before."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


@contextlib.contextmanager
def running_user_code(when: bool = True) -> Iterator[None]:
    """Inside a ``paused`` block, where ``when`` (there is user code to run): the collector runs
    as it did before the pause for the duration (the user's replayed cells and hooks may make
    garbage of any kind), and is held off again after. Its first collection then walks
    everything made since the pause began, so a resume with nothing of the user's to run passes
    ``when`` False and leaves that to after the resume."""
    with _lock:
        resumed = when and _depth > 0 and _was_enabled
        if resumed:
            gc.enable()
    try:
        yield
    finally:
        with _lock:
            if resumed and _depth > 0:
                gc.disable()
