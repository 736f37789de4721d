"""jupyter-pause: pause a notebook session, free its GPU, and resume the same session later."""

from __future__ import annotations

from typing import Any

from .checkpoint import BackgroundCheckpoint, CheckpointResult, checkpoint, checkpoint_async
from .cycle import Cycle, resume_and_verify
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
from .verdict import Verdict, verify
from .widget import status

__version__ = "0.1.0"

__all__ = [
    "BackgroundCheckpoint",
    "CheckpointNotFound",
    "CheckpointResult",
    "Cycle",
    "IntegrityError",
    "PauseError",
    "RestoreError",
    "ResumeResult",
    "SelectionError",
    "SerializationError",
    "StoreError",
    "Verdict",
    "checkpoint",
    "checkpoint_async",
    "load_ipython_extension",
    "resume",
    "resume_and_verify",
    "status",
    "verify",
]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Where jupyter-server finds the extension."""
    return [{"module": "jupyter_pause.server"}]


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext jupyter_pause``: register ``%checkpoint`` and ``%resume``."""
    from .magics import PauseMagics

    shell.register_magics(PauseMagics(shell))
