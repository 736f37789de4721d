"""The notebook's own modules: the files under its folder that the kernel imported (``from utils
import train``), kept with a checkpoint and put back on resume where the node lacks them.

A file that is present but differs is never replaced unless the resume is asked to
(``%resume --overwrite``); the conflict is named instead. Installed code is never a local module,
even when it lies inside the notebook's folder (a virtual environment there, an editable install).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import sys
import tempfile
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir

from ..notebook import kernel_start_folder
from ..store import signing
from ..store.integrity import fetch
from ..store.manifest import BlobRef, LocalModuleRecord, Manifest
from ..store.storage import Store
from .loaded import Loaded


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
    return kernel_start_folder() or START_FOLDER


def notebook_folder(notebook: str | None) -> str:
    """The notebook's folder; without a notebook, the folder the kernel started in. Relative
    places (the working directory, ``sys.path`` entries) are kept and put back relative to it."""
    return os.path.dirname(os.path.abspath(notebook)) if notebook else start_folder()


def folder_words(notebook: str | None) -> str:
    """What ``notebook_folder`` is, in words: "the notebook's folder" or "the kernel's start folder"."""
    return "the notebook's folder" if notebook else "the kernel's start folder"


_resolved = threading.local()


@contextlib.contextmanager
def resolving_once() -> Iterator[None]:
    """Within this block, this thread resolves each path's symbolic links once (a checkpoint
    compares every module's file with every installation folder: each would be resolved again)."""
    before = getattr(_resolved, "memo", None)
    _resolved.memo = {} if before is None else before
    try:
        yield
    finally:
        _resolved.memo = before


def _realpath(path: str) -> str:
    memo = getattr(_resolved, "memo", None)
    if memo is None:
        return os.path.realpath(path)
    found = memo.get(path)
    if found is None:
        found = memo[path] = os.path.realpath(path)
    return found


def relative_to(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` (``/``-separated, ``.`` for the folder itself) when it lies
    inside it, else None. Symbolic links are looked through when the plain paths disagree."""
    for inner, outer in (
        (os.path.abspath(path), os.path.abspath(folder)),
        (_realpath(path), _realpath(folder)),
    ):
        try:
            rel = os.path.relpath(inner, outer)
        except ValueError:  # another drive
            continue
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            return rel.replace(os.sep, "/")
    return None


def installed(path: str, roots: Sequence[str]) -> bool:
    """Whether ``path`` belongs to an installation rather than to the notebook."""
    if INSTALLED_PARTS & set(Path(path).parts):
        return True
    return any(relative_to(path, root) is not None for root in roots)


def imported_files(folder: str, loaded: Loaded | None = None) -> dict[str, str]:
    """The files under ``folder`` that modules of this process were loaded from: relative path ->
    module name. Not ``__main__``, not jupyter_pause itself, not installed code. ``loaded``: what
    the process has loaded, as a checkpoint read it once (default: read now)."""
    found = imported_under([folder], loaded)
    return {rel: found[path] for path in found if (rel := relative_to(path, folder)) is not None}


def imported_under(folders: list[str], loaded: Loaded | None = None) -> dict[str, str]:
    """The files under any of ``folders`` that modules of this process were loaded from: absolute
    path -> module name, in path order. Not ``__main__``, not jupyter_pause itself, not installed
    code. ``loaded``: as for ``imported_files``."""
    loaded = loaded or Loaded.now()
    # A string test first: thousands of modules are loaded, and resolving each path would cost.
    inside = tuple({os.path.join(f(folder), "") for folder in folders for f in (os.path.abspath, os.path.realpath)})
    found: dict[str, str] = {}
    for name, path in loaded.files:
        if not os.path.normpath(path).startswith(inside):
            continue
        path = os.path.normpath(path)
        if any(relative_to(path, folder) not in (None, ".") for folder in folders) and not installed(
            path, loaded.roots
        ):
            found.setdefault(path, name)
    return dict(sorted(found.items()))


@dataclass
class Kept:
    """The local modules a checkpoint keeps: their records, their bytes by key, and notes."""

    records: list[LocalModuleRecord] = field(default_factory=list)
    payloads: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # modules variables need that are not kept (``unkept``)


def capture(
    notebook: str | None,
    algorithm: str,
    entries: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
    loaded: Loaded | None = None,
) -> Kept:
    """Read the local modules: the files imported from under the notebook's folder, and from the
    ``sys.path`` folders the user added (``entries``, absolute), wherever the working directory is
    now. Without a known notebook only the latter: the folder a console started in may be a whole
    repository. A file under the notebook's folder (the kernel's start folder without one) is kept by
    its path relative to it; one outside it by its absolute path. A module that ``values`` need
    but that is not kept is named: it will not come back on a node that lacks it. ``loaded``: what
    the process has loaded, as the checkpoint read it once (default: read now)."""
    kept = Kept()
    loaded = loaded or Loaded.now()
    folder = notebook_folder(notebook)
    roots = ([folder] if notebook else []) + [e for e in entries if os.path.isdir(e)]
    for path, module in imported_under(roots, loaded).items() if roots else ():
        rel = relative_to(path, folder) or path.replace(os.sep, "/")
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            kept.notes.append(f"local module {rel} ({module}) NOT kept: {e.strerror or e}")
            continue
        if len(data) > MAX_FILE_BYTES:
            kept.notes.append(f"local module {rel} ({module}) NOT kept: {len(data)} bytes, over {MAX_FILE_BYTES}")
            continue
        key = signing.digest(data, algorithm)
        kept.payloads[key] = data
        kept.records.append(LocalModuleRecord(path=rel, module=module, blob=BlobRef(key=key, size=len(data))))
    if kept.records:
        kept.notes.append(f"local modules kept: {', '.join(r.path for r in kept.records)}")
    kept.lost = unkept(values or {}, {r.module for r in kept.records}, folder_words(notebook), loaded)
    return kept


def unkept(values: Mapping[str, Any], kept: set[str], words: str, loaded: Loaded | None = None) -> list[str]:
    """Notes naming each module that variables refer to (by their class, or being a function, class
    or module of it) that was loaded from a file of neither an installation nor the kept ones:
    a variable saved by reference to it cannot load where that file is missing. ``loaded``: as
    for ``capture``."""
    loaded = loaded or Loaded.now()
    roots = loaded.roots
    files = dict(loaded.files)
    needs: dict[str, list[str]] = {}
    for name, value in values.items():
        for module in _modules_of(value):
            if module in files and module not in kept:
                needs.setdefault(module, []).append(name)
    notes = []
    for module, names in sorted(needs.items()):
        path = files[module]
        if installed(path, roots) or not os.path.exists(path):
            continue
        notes.append(
            f"local module {module} ({path}) NOT kept: it lies outside {words} and the sys.path folders "
            f"added in this session; {', '.join(names)} will not come back on a node without it "
            f"(sys.path.insert(0, its folder) before the checkpoint keeps it)"
        )
    return notes


def _modules_of(value: Any) -> set[str]:
    """The modules a pickle of ``value`` names at its top: its class's, and its own for a
    function, class or module."""
    try:
        if isinstance(value, types.ModuleType):
            own = value.__name__
        else:
            own = getattr(value, "__module__", None) if isinstance(value, (type, types.FunctionType)) else None
    except ReferenceError:  # a dead weak proxy: only its own class is named
        own = None
    found = {getattr(type(value), "__module__", None), own}
    return {m for m in found if isinstance(m, str) and m not in ("__main__", "builtins")}


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


def aside_folder() -> str:
    """Where a local module kept from outside the notebook's folder is put back on a node that lacks
    its folder: a folder of jupyter-pause's own, put on ``sys.path`` (never a folder of the user's)."""
    return os.path.join(jupyter_data_dir(), "jupyter_pause", "modules")


def _aside_root(root: str) -> str:
    """The folder aside that stands for ``root``, a folder of another node."""
    return os.path.join(aside_folder(), hashlib.sha256(root.encode()).hexdigest()[:16])


def _aside(record: LocalModuleRecord) -> str | None:
    """Where an absolute ``record`` goes aside: one folder per import root, the package layout under it."""
    split = _split(record)
    return os.path.join(_aside_root(split[0]), *split[1].split("/")) if split else None


def _place(record: LocalModuleRecord, folder: str) -> tuple[str | None, str | None]:
    """Where ``record`` is looked for here, and where it is written when missing there."""
    if os.path.isabs(record.path):  # kept from outside the notebook's folder: put aside, not there
        return os.path.normpath(record.path), _aside(record)
    target = _target(folder, record.path)
    return target, target


def put_back(store: Store, manifest: Manifest, notebook: str | None, overwrite: bool) -> list[str]:
    """Write the checkpoint's local modules where they are missing under this notebook's folder
    (or differ, with ``overwrite``); one kept from outside it goes to ``aside_folder`` where its
    own file is missing. Returns notes for the resume summary."""
    folder = notebook_folder(notebook)
    wanted: dict[str, LocalModuleRecord] = {}
    notes: list[str] = []
    conflicts: list[str] = []
    for record in manifest.local_modules:
        here, target = _place(record, folder)
        if here is None or target is None:
            notes.append(f"local module {record.path} NOT put back: its path leaves the notebook's folder")
            continue
        for candidate in dict.fromkeys((here, target)):
            try:
                present = Path(candidate).read_bytes()
            except FileNotFoundError:
                continue
            except OSError as e:
                notes.append(f"local module {record.path} NOT put back: {e.strerror or e}")
                break
            if signing.digest(present, manifest.hash) == record.blob.key:
                break
            if candidate == target and (overwrite or os.path.isabs(record.path)):  # jupyter-pause's own copy: always
                wanted[target] = record
            elif candidate == here:
                conflicts.append(record.path)
            break
        else:
            wanted[target] = record
    good, bad = fetch(store, manifest, [r.blob.key for r in wanted.values()]) if wanted else ({}, {})
    written, replaced, aside = [], [], []
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
        (aside if os.path.isabs(record.path) else replaced if existed else written).append(record.path)
        _forget(target)
    if written or replaced or aside:
        importlib.invalidate_caches()
    head = []
    if written:
        head.append(f"local modules put back (missing here): {', '.join(written)}")
    if replaced:
        head.append(f"local modules replaced by the checkpoint's (--overwrite): {', '.join(replaced)}")
    if aside:
        head.append(f"local modules put back in {aside_folder()} (their folder is missing here): {', '.join(aside)}")
    head += [
        f"local module {path} NOT put back: the file here differs from the checkpoint's; kept it "
        + (
            "(it lies outside the notebook's folder: never replaced)"
            if os.path.isabs(path)
            else "(%resume --overwrite replaces it with the checkpoint's)"
        )
        for path in conflicts
    ]
    return head + notes


def _split(record: LocalModuleRecord) -> tuple[str, str] | None:
    """``record``'s path as (the folder it was imported from, the rest): ``pkg/core.py`` imported as
    ``pkg.core`` is ("", "pkg/core.py"); None when its path and name do not match (a module loaded
    from a file)."""
    parts = record.path.split("/")
    names = record.module.split(".")
    stem = parts[:-1] if parts[-1].startswith("__init__.") else [*parts[:-1], parts[-1].split(".")[0]]
    if len(stem) < len(names) or stem[len(stem) - len(names) :] != names:
        return None
    cut = len(stem) - len(names)
    root = "/".join(parts[:cut])
    return (root or "/") if parts[0] == "" else root, "/".join(parts[cut:])


def _import_root(record: LocalModuleRecord, folder: str) -> str | None:
    """The folder ``record``'s module is imported from here: under the notebook's folder for one
    kept relative to it; its own folder, else its folder aside, for one kept from outside."""
    split = _split(record)
    if split is None:
        return None
    root, _ = split
    if not os.path.isabs(record.path):
        return os.path.normpath(os.path.join(folder, *[p for p in root.split("/") if p]))
    return os.path.normpath(root) if os.path.exists(record.path) else _aside_root(root)


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
    words = folder_words(notebook)
    shown = [
        root if rel is None else words if rel == "." else f"{rel} (in {words})"
        for root in added
        for rel in [relative_to(root, folder)]
    ]
    return [f"sys.path + {s}, where local modules were imported from" for s in shown]
