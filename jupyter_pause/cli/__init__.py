"""The ``jupyter pause`` command line: list, show, verify, drill and clean up checkpoints.

It reads stores through ``jupyter_pause.store`` and never imports torch or IPython itself; the drill
runs its notebook in kernels of their own.
"""

from __future__ import annotations

from .main import main

__all__ = ["main"]
