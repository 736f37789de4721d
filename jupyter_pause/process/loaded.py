"""What this process has loaded, read once per checkpoint: the files its modules came from, the
folders of its regular packages, and the folders of the Python installation.

``Loaded.package_files`` names the files a package's modules came from, relative to the package's
folder: a checkpoint keeps them for its slow imports, so that a resume on a node whose disk has
not read them yet can ask for them all at once (``session.preimport``).

A checkpoint asks this several times (which files are local modules, which ``sys.path`` entries
are the user's, which modules variables need that are not kept); each answer walks thousands of
modules and asks ``sysconfig`` and ``site`` for the installation's folders. ``Loaded.now`` takes
one reading, and the checkpoint hands it to every step that needs it (``settings.keep``).
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass


def installed_roots() -> list[str]:
    """The folders of this Python installation: its prefixes, standard library and site folders."""
    roots = {sys.prefix, sys.exec_prefix, sys.base_prefix, *sysconfig.get_paths().values()}
    if hasattr(site, "getsitepackages"):
        roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    return sorted(roots)


#: The notebook's own namespace, under the names a kernel gives it: never a module of a file.
NOTEBOOKS = frozenset({"__main__", "__mp_main__"})


@dataclass(frozen=True)
class Loaded:
    """One reading of ``sys.modules`` and of the installation's folders.

    Attributes
    ----------
    files
        (module name, absolute file) of each module loaded from a file: not the notebook's
        namespace, not jupyter_pause itself.
    packages
        The folders of the regular packages loaded (their ``__path__``), absolute. Not namespace
        packages: a user's plain folder imported as one (``import src.train``) is not a package's own.
    roots
        The folders of this Python installation (``installed_roots``).
    """

    files: tuple[tuple[str, str], ...]
    packages: frozenset[str]
    roots: tuple[str, ...]

    @classmethod
    def now(cls) -> Loaded:
        """Read what the process has loaded now: one walk of ``sys.modules``."""
        files: list[tuple[str, str]] = []
        packages: set[str] = set()
        for name, module in list(sys.modules.items()):
            if name in NOTEBOOKS:
                continue
            found = getattr(module, "__dict__", {})  # never triggers a lazy import
            path = found.get("__file__")
            if not isinstance(path, str):
                continue
            if os.path.isabs(path) and name.split(".")[0] != "jupyter_pause":
                files.append((name, path))
            if found.get("__path__") is not None:
                packages.update(_folders(found["__path__"]))
        return cls(files=tuple(files), packages=frozenset(packages), roots=tuple(installed_roots()))

    def package_files(self, packages: Iterable[str]) -> dict[str, list[str]]:
        """For each of the top-level ``packages`` loaded from a folder of its own, the files its
        modules came from, in the order their imports ended (``sys.modules``'s), as paths
        relative to that folder with ``/`` between parts: a module's source (the reader finds
        the compiled file its own Python keeps for it), an extension module's library."""
        wanted = set(packages)
        prefixes = {  # string work only: pathlib's, for torch's 4,000 modules, was 50 ms a checkpoint
            name: os.path.dirname(path) + os.sep
            for name, path in self.files
            if name in wanted and os.path.basename(path).startswith("__init__.")
        }
        found: dict[str, dict[str, None]] = {name: {} for name in prefixes}  # each file once (an
        for name, path in self.files:  # extension library holds several modules), first seen first
            top = name.partition(".")[0]
            if top in prefixes and path.startswith(prefixes[top]):
                found[top].setdefault(path[len(prefixes[top]) :].replace(os.sep, "/"))
        return {name: list(files) for name, files in found.items()}


def _folders(path: object) -> set[str]:
    """The folders of a package's ``__path__``, absolute; none where it cannot be recomputed."""
    try:
        return {os.path.abspath(p) for p in list(path) if isinstance(p, str) and p}  # type: ignore[call-overload]
    except Exception:  # a namespace package whose path cannot be recomputed: not a folder of its own
        return set()
