"""What will not come back on another node, said when the checkpoint is taken, not first at resume.

A checkpoint names, while the kernel that could still fix it runs: a module variables need that is
not kept (``localmodules``); a variable neither saved nor rebuildable; one rebuilt by replay whose
state nothing can check (``proof.observed``: it may come back different, unproven); an open file,
an optuna study's SQLite file and the working directory, outside the notebook's folder (another
node may not have them). The
lines go into the manifest (``Manifest.elsewhere``), so ``%checkpoint``, ``jupyter pause show`` and
the status widget say the same.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

from ..process.localmodules import relative_to
from ..replay.reach import OUTSIDE
from ..serialize.thirdparty import storage_file
from ..store.manifest import RecipeRecord, SkippedRecord


def lines(
    lost_modules: list[str],
    skipped: list[SkippedRecord],
    recipes: list[RecipeRecord],
    values: Mapping[str, Any],
    settings: Mapping[str, Any],
    folder: str,
    words: str,
) -> list[str]:
    """Each thing that will not come back, or not provably, on another node, as one line.

    Parameters
    ----------
    lost_modules
        The modules variables need that are not kept, as ``localmodules.capture`` names them.
    skipped, recipes
        The variables not saved, and how each is rebuilt.
    values
        The variables the checkpoint saves (open files among them are looked at).
    settings
        The kept settings (``settings.capture``): the working directory's place.
    folder, words
        The notebook's folder (without a notebook, the kernel's start folder) and its name in words.
    """
    found = list(lost_modules)
    by_name = {r.name: r for r in recipes}
    for record in skipped:
        recipe = by_name.get(record.name)
        if recipe is None or recipe.missing:
            why = recipe.missing if recipe is not None else "there is no recipe to rebuild it"
            found.append(f"{record.name} ({record.type}): not saved, and cannot be rebuilt: {why}")
        elif not recipe.observed:
            how = "only the statement that opened it is replayed, and " if recipe.reach == OUTSIDE else ""
            found.append(
                f"{record.name} ({record.type}): rebuilt by replay, unproven: {how}nothing can check its "
                "state against the one it has now"
            )
    for name, value in values.items():
        path = _outside_file(value, folder)
        if path:
            found.append(f"{name} (open file {path}): lies outside {words}; it comes back only where that path exists")
        database = storage_file(value)
        if database and relative_to(database, folder) is None:
            found.append(
                f"{name} (optuna study in {database}): its trials are in that file, outside {words}; it comes back "
                "only where that file is"
            )
    cwd = settings.get("cwd") or {}
    if cwd and not cwd.get("in_notebook_folder", True):
        found.append(f"working directory {cwd.get('path')}: lies outside {words}; another node may not have it")
    return found


def short(found: list[str]) -> str:
    """The lines in one short phrase for the status widget: what each names, not why."""
    return "not on another node, or not provably: " + ", ".join(line.split(":")[0] for line in found)


def _outside_file(value: Any, folder: str) -> str | None:
    """The path of an open file on disk outside ``folder`` (None for anything else)."""
    try:
        if not isinstance(value, io.IOBase) or value.closed:
            return None
        path = getattr(value, "name", None)
    except (AttributeError, ValueError, OSError, ReferenceError):  # half torn down, a dead weak proxy: no place
        return None
    if not isinstance(path, str) or not os.path.isabs(path):
        return None
    return path if relative_to(path, folder) is None else None
