"""Notebook cells run in this process as IPython runs them: the source in ``linecache`` under a
file name that holds the kernel (``/tmp/ipykernel_<pid>/...``), so a "new kernel" runs the same
source under another name; and ``Stop``, which ends a cell at a chosen safe point as a kill would."""

from __future__ import annotations

import linecache

_cells = 0


def run_cell(source: str, namespace: dict, kernel: str = "1") -> None:
    """Run ``source`` as kernel ``kernel`` runs a cell."""
    global _cells
    _cells += 1
    filename = f"/tmp/ipykernel_{kernel}/{_cells}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


class Stop(Exception):
    """Ends a cell at a chosen safe point, as a kill would."""
