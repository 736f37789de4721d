"""How a module is found again in a new process: by its name, or as an attribute of its package.

A module is imported again by its ``__name__``, except where that name does not lead back to it.
An extension package's submodule made by its compiled code (``from tokenizers import trainers``
binds a module named ``trainers``, which is in no ``sys.modules`` entry) is not importable by its
name, and importing ``tokenizers.trainers`` gives another module (the package's Python wrapper).
Such a module is found again as the package's attribute it was reached through, written
``package:attribute`` (the entry-point notation), the package being the shortest-named module
that holds it.
"""

from __future__ import annotations

import importlib
import sys
import types

#: Separates the package from the attribute path in an address (``tokenizers:trainers``).
SEPARATOR = ":"

#: The notebook's own namespace, under the names a kernel gives it (multiprocessing aliases
#: ``__main__`` as ``__mp_main__``): never the package a submodule is found in again.
NOTEBOOKS = frozenset({"__main__", "__mp_main__"})


def _holders(module: types.ModuleType) -> list[tuple[str, str]]:
    """``(package, attribute)`` pairs of loaded modules holding ``module``: those holding it under
    its own name first, any attribute name only when none does."""
    leaf = module.__name__.rpartition(".")[2]
    loaded = [(name, found) for name, found in list(sys.modules.items()) if isinstance(found, types.ModuleType)]
    held = [(name, leaf) for name, found in loaded if getattr(found, "__dict__", {}).get(leaf) is module]
    if held:
        return held
    return [
        (name, attribute)
        for name, found in loaded
        for attribute, value in list(getattr(found, "__dict__", {}).items())
        if value is module and not attribute.startswith("_")
    ]


def address(module: types.ModuleType) -> str:
    """What finds ``module`` again (``find``): its name when importing that name gives it back,
    else ``package:attribute``; its name when no loaded package holds it (importing that may fail)."""
    name = module.__name__
    if sys.modules.get(name) is module:
        return name
    holders = [(package, attribute) for package, attribute in _holders(module) if package not in NOTEBOOKS]
    if not holders:
        return name
    package, attribute = min(holders, key=lambda pair: (pair[0].count("."), len(pair[0]), pair))
    return f"{package}{SEPARATOR}{attribute}"


def find(where: str) -> types.ModuleType:
    """The module at ``where`` (an ``address``): imported by name, or taken from its package."""
    package, _, attribute = where.partition(SEPARATOR)
    found = importlib.import_module(package)
    for part in attribute.split(".") if attribute else ():
        found = getattr(found, part)
    if not isinstance(found, types.ModuleType):
        raise ImportError(f"{package}.{attribute} is a {type(found).__name__} here, not a module")
    return found
