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

On a node whose disk has not read the package yet (a new node, a new container), the import
reads its compiled modules one after another, each a wait on the disk: torch's 720 or so, beside
a restore's reads, cost a cold import about half a second more than a warm one. A checkpoint names the files
its slow imports' modules came from (``Manifest.import_files``), and ``begin`` asks the disk for
them all (``read_ahead``) before the import starts reading them.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath

from ..store import readahead

#: The native libraries a package's import loads first, relative to the package's folder.
NATIVE: dict[str, tuple[str, ...]] = {"torch": ("lib/libtorch_cpu.so",)}
#: Environment variables under which a package loads its libraries its own way (torch, with
#: ``TORCH_USE_RTLD_GLOBAL``, shares their symbols with every library): none is loaded ahead then.
OWN_LOADING = {"torch": "TORCH_USE_RTLD_GLOBAL"}

#: At most this many files of one package are asked for ahead of its import.
MOST_FILES = 20_000

_lock = threading.Lock()
_pending: dict[str, threading.Thread] = {}


def _import(name: str, files: Sequence[str]) -> None:
    try:
        folder = package_folder(name)
        if folder is not None and files:
            read_ahead(folder, files)
        load_native(name, folder)
        importlib.import_module(name)
    except Exception:  # the restore's own import of it (the unpickler's) names the problem
        pass


def package_folder(name: str) -> str | None:
    """The folder of top-level package ``name``, found without importing it; None where it is
    not installed or not a package of one folder."""
    spec = importlib.util.find_spec(name)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    return folders[0] if folders else None


def read_ahead(folder: str, files: Sequence[str]) -> int:
    """Ask the disk for ``files`` of the package in ``folder`` (``Manifest.import_files``: paths
    relative to it) ahead of the import that reads them; how many were asked for. A module's
    source stands for the compiled file this Python keeps for it, where there is one; a path
    that is not relative, or leaves the folder, is passed over."""
    paths: list[str] = []
    for relative in files[:MOST_FILES]:
        parts = PurePosixPath(relative).parts if isinstance(relative, str) else ()
        if not parts or PurePosixPath(relative).is_absolute() or ".." in parts:
            continue
        path = os.path.join(folder, *parts)
        if path.endswith(".py") and sys.implementation.cache_tag is not None:
            compiled = importlib.util.cache_from_source(path)
            path = compiled if os.path.exists(compiled) else path
        paths.append(path)
    return readahead.ask(paths)


def load_native(name: str, folder: str | None = None) -> list[str]:
    """Load the native libraries top-level package ``name`` (in ``folder``, found where not
    given) loads first (``NATIVE``), with the GIL released; those loaded. None where they are not
    there (another platform or build, a package not installed) or cannot be loaded so: the
    import loads what it needs, as it always does."""
    relative, own_way = NATIVE.get(name, ()), OWN_LOADING.get(name)
    if not relative or (own_way and os.environ.get(own_way)):
        return []
    folder = folder or package_folder(name)
    paths = [os.path.join(folder, r) for r in relative] if folder else []
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


def begin(modules: Iterable[str], files: Mapping[str, Sequence[str]] | None = None) -> None:
    """Start importing each of ``modules`` not imported yet, each on a thread of its own, which
    first asks the disk for the module's ``files`` (``Manifest.import_files``) where given."""
    for name in modules:
        with _lock:
            if name in sys.modules or name in _pending:
                continue
            named = files.get(name) if isinstance(files, Mapping) else None  # a manifest's, as read
            thread = _pending[name] = threading.Thread(
                target=_import,
                args=(name, named if isinstance(named, list) else []),
                name=f"jupyter-pause-import-{name}",
                daemon=True,
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
