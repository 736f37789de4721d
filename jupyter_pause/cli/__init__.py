"""The ``jupyter pause`` command line: ``list`` sessions, ``show`` and ``verify`` a checkpoint,
``gc`` (clean up), ``report`` (resumes' verdicts and timings), ``journal``, ``drill`` (pause and
resume a notebook end to end) and ``hours`` (the GPU-hours report).

It reads stores through ``jupyter_pause.store`` and never imports torch or IPython itself; the drill
runs its notebook in kernels of their own.
"""

from __future__ import annotations

from .main import main

__all__ = ["main"]
