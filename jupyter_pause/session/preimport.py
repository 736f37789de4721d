"""Slow imports begun on threads of their own, ahead of the restore that needs them.

In a new kernel torch is the slowest import there is, about a CPU-second, and a restore needs it
only to unpickle: after the checkpoint is found, its manifest checked and its blobs read, work
that mostly waits on the network. ``begin`` starts such an import where the restore starts, or
where the server, which knows the checkpoint, asks the kernel to; ``wait`` joins it before the
first object is unpickled. Until then the restore does not look at the partly imported module:
an ``import`` statement of it elsewhere waits on the module's own lock, as any import does.

An import holds the GIL throughout, the loading of its native libraries included: torch's (0.2 s
cold, their static initialisers run) left a restore's reads unable to send their next request,
and the store idle, for as long. So the libraries a package loads first (``NATIVE``) are loaded
before its import, through the C library's ``dlopen``, which ctypes calls with the GIL released;
the import then finds them loaded.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable

#: The native libraries a package's import loads first, relative to the package's folder.
NATIVE: dict[str, tuple[str, ...]] = {"torch": ("lib/libtorch_cpu.so",)}
#: Environment variables under which a package loads its libraries its own way (torch, with
#: ``TORCH_USE_RTLD_GLOBAL``, shares their symbols with every library): none is loaded ahead then.
OWN_LOADING = {"torch": "TORCH_USE_RTLD_GLOBAL"}

_lock = threading.Lock()
_pending: dict[str, threading.Thread] = {}


def _import(name: str) -> None:
    try:
        load_native(name)
        importlib.import_module(name)
    except Exception:  # the restore's own import of it (the unpickler's) names the problem
        pass


def load_native(name: str) -> list[str]:
    """Load the native libraries top-level package ``name`` loads first (``NATIVE``), with the GIL
    released; those loaded. None where they are not there (another platform or build, a package
    not installed) or cannot be loaded so: the import loads what it needs, as it always does."""
    relative, own_way = NATIVE.get(name, ()), OWN_LOADING.get(name)
    if not relative or (own_way and os.environ.get(own_way)):
        return []
    spec = importlib.util.find_spec(name)  # found, not imported
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    paths = [os.path.join(folders[0], r) for r in relative] if folders else []
    return [path for path in paths if os.path.isfile(path) and _dlopen(path)]


def _dlopen(path: str) -> bool:
    """``dlopen(path, RTLD_NOW)`` with the GIL released (a ``CDLL`` function); whether it loaded.
    The library stays loaded: the import about to run holds it too."""
    try:
        dlopen = ctypes.CDLL(None).dlopen
    except (OSError, AttributeError, TypeError):  # no dlopen to call here (Windows)
        return False
    dlopen.restype, dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    return bool(dlopen(os.fsencode(path), os.RTLD_NOW))


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
