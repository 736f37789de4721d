"""The working directory and the ``sys.path`` entries the user added, kept relative to the
notebook's folder (without a notebook, the kernel's start folder) where they lie under it, and
put back on resume; a folder this node lacks is named, never an error.

The ``sys.path`` entries kept are the user's: those a cell, ``%run`` or ``%load_ext`` added.
Entries a fresh interpreter starts with are not, nor those an installed package added while
it was imported: a folder under the Python installation (``site-packages``, the standard
library) or inside an imported package's own folder (``setuptools/_vendor``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import localmodules
from .loaded import Loaded
from .localmodules import relative_to

#: ``sys.path`` when jupyter_pause was loaded: the baseline when a fresh interpreter cannot say.
PATH_AT_LOAD = tuple(sys.path)


def place(path: str, folder: str) -> dict[str, Any]:
    """A folder as kept: relative to ``folder`` when it lies under it."""
    rel = relative_to(path, folder) if os.path.isabs(path) else None
    return {"path": rel, "in_notebook_folder": True} if rel is not None else {"path": path, "in_notebook_folder": False}


def resolve(kept: dict[str, Any], folder: str) -> str:
    """Where a kept place is here, ``folder`` being this kernel's."""
    path = kept["path"]
    return os.path.normpath(os.path.join(folder, path)) if kept.get("in_notebook_folder") else path


def show(kept: dict[str, Any], words: str) -> str:
    """A kept place for the summary (``data (in the kernel's start folder)``)."""
    return f"{kept['path']} (in {words})" if kept.get("in_notebook_folder") else kept["path"]


@lru_cache(maxsize=1)
def startup_path() -> frozenset[str]:
    """The ``sys.path`` a fresh interpreter of this environment starts with (its site folders,
    ``.pth`` files, PYTHONPATH): whatever else is there was added since."""
    probe = "import json, sys; print(json.dumps(sys.path))"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=10, check=True)
        return frozenset(json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return frozenset(PATH_AT_LOAD)


def _installed_entry(entry: str, loaded: Loaded) -> bool:
    """Whether a ``sys.path`` entry belongs to installed code, not to the user: it lies under the
    Python installation, or inside (or is) an imported package's own folder."""
    full = os.path.abspath(entry)
    if localmodules.installed(full, loaded.roots):
        return True
    return any(os.path.abspath(p) in loaded.packages for p in (full, *Path(full).parents))


def _added(loaded: Loaded | None) -> list[tuple[int, str]]:
    """The ``sys.path`` entries the user added, with their index (``loaded``: as the checkpoint
    read it once; default: read now)."""
    startup = startup_path()
    loaded = loaded or Loaded.now()
    return [
        (i, entry)
        for i, entry in enumerate(sys.path)
        if isinstance(entry, str) and entry not in startup and not _installed_entry(entry, loaded)
    ]


def added_folders(loaded: Loaded | None = None) -> list[str]:
    """The ``sys.path`` folders the user added, absolute: where local modules may be imported from.
    A relative entry (``"lib"``) is the folder the import system took it for when it was first
    used, not the one it names from the working directory now (the notebook may have changed it).
    ``loaded``: what the process has loaded, as the checkpoint read it once (default: read now)."""
    return [_imported_from(entry) for _, entry in _added(loaded) if entry]


def _imported_from(entry: str) -> str:
    finder = sys.path_importer_cache.get(entry)
    path = getattr(finder, "path", None)  # a FileFinder keeps the absolute folder it searched
    return path if isinstance(path, str) and os.path.isabs(path) else os.path.abspath(entry)


def capture_sys_path(folder: str, loaded: Loaded | None = None) -> list[dict[str, Any]]:
    """The entries the user added, in order; ``front`` for those before the startup entries.
    ``loaded``: as for ``added_folders``."""
    startup = startup_path()
    first = next((i for i, entry in enumerate(sys.path) if entry in startup), len(sys.path))
    return [{**place(entry, folder), "front": i < first} for i, entry in _added(loaded)]


def apply_cwd(kept: dict[str, Any], folder: str, words: str, applied: list[str], refused: list[str]) -> None:
    """Change to the kept working directory, or name it when this node lacks it."""
    target = resolve(kept, folder)
    here = localmodules.current_folder()
    if here is not None and relative_to(target, here) == ".":
        return
    if not os.path.isdir(target):
        refused.append(f"working directory {show(kept, words)}: no such folder on this node; left at {here}")
        return
    os.chdir(target)
    applied.append(f"working directory {show(kept, words)}")


def apply_sys_path(kept: list[dict[str, Any]], folder: str, words: str, applied: list[str], refused: list[str]) -> None:
    """Put back the kept entries this ``sys.path`` lacks, in place; a folder missing here is named."""
    front = 0
    for entry_kept in kept:
        entry = resolve(entry_kept, folder)
        if entry in sys.path:
            front += entry_kept.get("front", False)
            continue
        if not os.path.isdir(entry if os.path.isabs(entry) else os.path.abspath(entry)):
            refused.append(f"sys.path entry {show(entry_kept, words)}: no such folder on this node")
            continue
        if entry_kept.get("front"):
            sys.path.insert(front, entry)
            front += 1
        else:
            sys.path.append(entry)
        applied.append(f"sys.path + {show(entry_kept, words)}")
