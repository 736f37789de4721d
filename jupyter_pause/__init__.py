"""jupyter-pause: pause a notebook session, free its GPU, and resume the same session later."""

from __future__ import annotations

from typing import Any

from .checkpoint import CheckpointResult, checkpoint
from .errors import (
    CheckpointNotFound,
    IntegrityError,
    PauseError,
    RestoreError,
    SelectionError,
    SerializationError,
    StoreError,
)
from .restore import ResumeResult, resume

__version__ = "0.1.0"

__all__ = [
    "CheckpointNotFound",
    "CheckpointResult",
    "IntegrityError",
    "PauseError",
    "RestoreError",
    "ResumeResult",
    "SelectionError",
    "SerializationError",
    "StoreError",
    "checkpoint",
    "load_ipython_extension",
    "resume",
]


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext jupyter_pause``: register ``%checkpoint`` and ``%resume``."""
    from .magics import PauseMagics

    shell.register_magics(PauseMagics(shell))
