"""The notebook's own modules: the files under its folder that the kernel imported (``from utils
import train``), kept with a checkpoint and put back on resume where the node lacks them.

A file that is present but differs is never replaced unless the resume is asked to
(``%resume --overwrite``); the conflict is named instead. Installed code is never a local module,
even when it lies inside the notebook's folder (a virtual environment there, an editable install).
"""

from __future__ import annotations

import importlib
import os
import site
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store import signing
from ..store.integrity import fetch
from ..store.manifest import BlobRef, LocalModuleRecord, Manifest
from ..store.storage import Store


def current_folder() -> str | None:
    """The working directory, or None when it was removed under the process."""
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under the process
        return None


#: The folder the process was in when jupyter_pause was loaded: its start folder when IPython does
#: not say (a script calling ``jupyter_pause.checkpoint`` outside IPython).
START_FOLDER = current_folder() or os.path.expanduser("~")

#: A local module file larger than this is not kept (the checkpoint's summary names it).
MAX_FILE_BYTES = 16 << 20

#: Folder names that only ever hold installed packages.
INSTALLED_PARTS = frozenset({"site-packages", "dist-packages"})


def start_folder() -> str:
    """The folder the kernel started in, as IPython took it when the kernel started, before any
    cell could change it (``%load_ext jupyter_pause`` may come after an ``os.chdir``); outside
    IPython, the folder when jupyter_pause was loaded."""
    ipython = sys.modules.get("IPython")  # not loaded: no kernel to ask
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    started = getattr(shell, "starting_dir", None)
    return started if isinstance(started, str) and os.path.isabs(started) else START_FOLDER


def notebook_folder(notebook: str | None) -> str:
    """The notebook's folder; without a notebook, the folder the kernel started in. Relative
    places (the working directory, ``sys.path`` entries) are kept and put back relative to it."""
    return os.path.dirname(os.path.abspath(notebook)) if notebook else start_folder()


def folder_words(notebook: str | None) -> str:
    """What ``notebook_folder`` is, in words: "the notebook's folder" or "the kernel's start folder"."""
    return "the notebook's folder" if notebook else "the kernel's start folder"


def relative_to(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` (``/``-separated, ``.`` for the folder itself) when it lies
    inside it, else None. Symbolic links are looked through when the plain paths disagree."""
    for inner, outer in (
        (os.path.abspath(path), os.path.abspath(folder)),
        (os.path.realpath(path), os.path.realpath(folder)),
    ):
        try:
            rel = os.path.relpath(inner, outer)
        except ValueError:  # another drive
            continue
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return rel.replace(os.sep, "/")
    return None


def installed_roots() -> list[str]:
    """The folders of this Python installation: its prefixes, standard library and site folders."""
    roots = {sys.prefix, sys.exec_prefix, sys.base_prefix, *sysconfig.get_paths().values()}
    if hasattr(site, "getsitepackages"):
        roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    return sorted(roots)


def installed(path: str, roots: list[str]) -> bool:
    """Whether ``path`` belongs to an installation rather than to the notebook."""
    if INSTALLED_PARTS & set(Path(path).parts):
        return True
    return any(relative_to(path, root) is not None for root in roots)


def imported_files(folder: str) -> dict[str, str]:
    """The files under ``folder`` that modules of this process were loaded from: relative path ->
    module name. Not ``__main__``, not jupyter_pause itself, not installed code."""
    roots = installed_roots()
    # A string test first: thousands of modules are loaded, and resolving each path would cost.
    inside = tuple({os.path.join(os.path.abspath(folder), ""), os.path.join(os.path.realpath(folder), "")})
    found: dict[str, str] = {}
    for name, module in list(sys.modules.items()):
        if name in ("__main__", "__mp_main__") or name.split(".")[0] == "jupyter_pause":
            continue
        path = getattr(module, "__dict__", {}).get("__file__")  # never triggers a lazy import
        if not isinstance(path, str) or not os.path.isabs(path) or not os.path.normpath(path).startswith(inside):
            continue
        rel = relative_to(os.path.normpath(path), folder)
        if rel is None or rel == "." or installed(path, roots):
            continue
        found.setdefault(rel, name)
    return dict(sorted(found.items()))


@dataclass
class Kept:
    """The local modules a checkpoint keeps: their records, their bytes by key, and notes."""

    records: list[LocalModuleRecord] = field(default_factory=list)
    payloads: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def capture(notebook: str | None, algorithm: str) -> Kept:
    """Read the local modules of a notebook kernel. Without a known notebook none are kept: the
    folder a console started in may be a whole repository."""
    kept = Kept()
    if not notebook:
        return kept
    folder = notebook_folder(notebook)
    for rel, module in imported_files(folder).items():
        try:
            data = Path(folder, rel).read_bytes()
        except OSError as e:
            kept.notes.append(f"local module {rel} ({module}) not kept: {e.strerror or e}")
            continue
        if len(data) > MAX_FILE_BYTES:
            kept.notes.append(f"local module {rel} ({module}) not kept: {len(data)} bytes, over {MAX_FILE_BYTES}")
            continue
        key = signing.digest(data, algorithm)
        kept.payloads[key] = data
        kept.records.append(LocalModuleRecord(path=rel, module=module, blob=BlobRef(key=key, size=len(data))))
    if kept.records:
        kept.notes.append(f"local modules kept: {', '.join(r.path for r in kept.records)}")
    return kept


def _target(folder: str, rel: str) -> str | None:
    """Where a recorded file goes under ``folder``; None for a path that would leave it."""
    target = os.path.normpath(os.path.join(folder, rel))
    if os.path.isabs(rel) or relative_to(target, folder) in (None, "."):
        return None
    return target


def _write(target: str, data: Any) -> None:
    """Write a file whole or not at all (a temporary name, then a rename)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".jupyter-pause-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _forget(target: str) -> list[str]:
    """Drop the modules loaded from ``target`` so the next import reads the file put back."""
    gone = [
        name
        for name, module in list(sys.modules.items())
        if isinstance(getattr(module, "__dict__", {}).get("__file__"), str)
        and os.path.abspath(module.__dict__["__file__"]) == target
    ]
    for name in gone:
        del sys.modules[name]
    return gone


def put_back(store: Store, manifest: Manifest, notebook: str | None, overwrite: bool) -> list[str]:
    """Write the checkpoint's local modules where they are missing under this notebook's folder
    (or differ, with ``overwrite``); returns notes for the resume summary."""
    folder = notebook_folder(notebook)
    wanted: dict[str, LocalModuleRecord] = {}
    notes: list[str] = []
    conflicts: list[str] = []
    for record in manifest.local_modules:
        target = _target(folder, record.path)
        if target is None:
            notes.append(f"local module {record.path} NOT put back: its path leaves the notebook's folder")
            continue
        try:
            present = Path(target).read_bytes()
        except FileNotFoundError:
            wanted[target] = record
            continue
        except OSError as e:
            notes.append(f"local module {record.path} NOT put back: {e.strerror or e}")
            continue
        if signing.digest(present, manifest.hash) == record.blob.key:
            continue
        if overwrite:
            wanted[target] = record
        else:
            conflicts.append(record.path)
    good, bad = fetch(store, manifest, [r.blob.key for r in wanted.values()]) if wanted else ({}, {})
    written, replaced = [], []
    for target, record in wanted.items():
        if record.blob.key not in good:
            notes.append(f"local module {record.path} NOT put back: its blob is {bad.get(record.blob.key, 'missing')}")
            continue
        existed = os.path.exists(target)
        try:
            _write(target, good[record.blob.key])
        except OSError as e:
            notes.append(f"local module {record.path} NOT put back: {e.strerror or e}")
            continue
        (replaced if existed else written).append(record.path)
        _forget(target)
    if written or replaced:
        importlib.invalidate_caches()
    head = []
    if written:
        head.append(f"local modules put back (missing here): {', '.join(written)}")
    if replaced:
        head.append(f"local modules replaced by the checkpoint's (--overwrite): {', '.join(replaced)}")
    head += [
        f"local module {path} NOT put back: the file here differs from the checkpoint's; kept it "
        "(%resume --overwrite replaces it with the checkpoint's)"
        for path in conflicts
    ]
    return head + notes


def _import_root(record: LocalModuleRecord, folder: str) -> str | None:
    """The folder ``record``'s module was imported from (``pkg/core.py`` as ``pkg.core``: the
    notebook's folder); None when its path and name do not match (a module loaded from a file)."""
    parts = record.path.split("/")
    names = record.module.split(".")
    if parts[-1].startswith("__init__."):
        parts = parts[:-1]
    else:
        parts[-1] = parts[-1].split(".")[0]
    if len(parts) < len(names) or parts[len(parts) - len(names) :] != names:
        return None
    return os.path.normpath(os.path.join(folder, *parts[: len(parts) - len(names)]))


def _on_path(folder: str) -> bool:
    """Whether an import looks in ``folder`` (``""`` and relative entries: from the working directory)."""
    return any(relative_to(folder, os.path.abspath(entry)) == "." for entry in sys.path if isinstance(entry, str))


def make_importable(manifest: Manifest, notebook: str | None) -> list[str]:
    """Once the working directory and ``sys.path`` are back: the folders the local modules were
    imported from are on the import path (a kernel imports from its working directory, which the
    notebook may have changed after importing them)."""
    folder = notebook_folder(notebook)
    roots = {root for r in manifest.local_modules if (root := _import_root(r, folder)) and os.path.isdir(root)}
    added = [root for root in sorted(roots) if not _on_path(root)]
    sys.path.extend(added)
    rels = [relative_to(root, folder) for root in added]
    shown = [("the notebook's folder" if rel == "." else f"{rel} (in the notebook's folder)") for rel in rels]
    return [f"sys.path + {s}, where local modules were imported from" for s in shown]
