"""Slow imports begun on threads of their own, ahead of the restore that needs them.

In a new kernel torch is the slowest import there is, about a CPU-second, and a restore needs it
only to unpickle: after the checkpoint is found, its manifest checked and its blobs read, work
that mostly waits on the network. ``begin`` starts such an import where the restore starts, or
where the server, which knows the checkpoint, asks the kernel to; ``wait`` joins it before the
first object is unpickled. Until then the restore does not look at the partly imported module:
an ``import`` statement of it elsewhere waits on the module's own lock, as any import does.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterable

_lock = threading.Lock()
_pending: dict[str, threading.Thread] = {}


def _import(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception:  # the restore's own import of it (the unpickler's) names the problem
        pass


def begin(modules: Iterable[str]) -> None:
    """Start importing each of ``modules`` not imported yet, each on a thread of its own."""
    for name in modules:
        with _lock:
            if name in sys.modules or name in _pending:
                continue
            thread = _pending[name] = threading.Thread(
                target=_import, args=(name,), name=f"jupyter-pause-import-{name}", daemon=True
            )
        thread.start()


def wait() -> None:
    """Return once every import ``begin`` started has ended (imported, or failed)."""
    with _lock:
        threads = list(_pending.values())
    for thread in threads:
        thread.join()
    with _lock:
        for name, thread in list(_pending.items()):
            if not thread.is_alive():
                del _pending[name]
