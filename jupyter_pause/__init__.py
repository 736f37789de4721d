"""jupyter-pause: pause a notebook session, free its GPU, and resume the same session later.

The public names below load their modules on first use, so ``import jupyter_pause`` stays cheap
(the server and the command line import the package without torch or IPython).

Layout, bottom to top (``layers.py`` is the rule of who imports whom, checked by a test):

- ``store/``: the checkpoint format and its storage (fsspec), signing, retention;
- ``ledger/``: the GPU-hours ledger's records, kept in the store;
- ``serialize/``: values to bytes and back (pickler, arrays outside pickle, digests);
- ``proof/``: the restore test's evidence (probe, model checks, hardware) and its verdict;
- ``process/``: what the kernel process holds beside its variables (RNG, settings, its own modules);
- ``replay/``: the cell history, and rebuilding by replay what cannot be saved;
- ``session/``: capturing a namespace into a checkpoint and restoring it;
- ``loops/``: ``steps`` loops, their positions and safe points;
- ``journal/``: the work journal of a queue of items;
- ``kernel/``: the IPython layer (magics, status widget, periodic checkpoints, the server's entry points);
- ``protocol/``: what the server and a kernel say to each other;
- ``server/``: the Jupyter server extension (pause, resume, status, REST API, spot notices);
- ``hours/``: the GPU-hours report from the ledger; ``hub/``: the JupyterHub service and keys;
- ``cli/``: the ``jupyter pause`` command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    CheckpointDamaged,
    CheckpointNotFound,
    IntegrityError,
    PauseError,
    RestoreError,
    SelectionError,
    SerializationError,
    StoreError,
)

if TYPE_CHECKING:
    from .journal.journal import journal
    from .kernel.widget import status
    from .loops.steps import steps
    from .proof.verdict import Verdict
    from .session.checkpoint import BackgroundCheckpoint, CheckpointResult, checkpoint, checkpoint_async
    from .session.cycle import Cycle, resume_and_verify, verify
    from .session.hooks import after_resume, before_checkpoint
    from .session.options import CheckpointOptions, ResumeOptions
    from .session.restore import ResumeResult, resume

__version__ = "0.1.0"

# Public name -> the module that defines it, imported when the name is first used.
_LAZY = {
    "BackgroundCheckpoint": ".session.checkpoint",
    "CheckpointResult": ".session.checkpoint",
    "CheckpointOptions": ".session.options",
    "ResumeOptions": ".session.options",
    "checkpoint": ".session.checkpoint",
    "after_resume": ".session.hooks",
    "before_checkpoint": ".session.hooks",
    "checkpoint_async": ".session.checkpoint",
    "Cycle": ".session.cycle",
    "resume_and_verify": ".session.cycle",
    "journal": ".journal.journal",
    "steps": ".loops.steps",
    "ResumeResult": ".session.restore",
    "resume": ".session.restore",
    "Verdict": ".proof.verdict",
    "verify": ".session.cycle",
    "status": ".kernel.widget",
}

__all__ = [
    "BackgroundCheckpoint",
    "CheckpointDamaged",
    "CheckpointNotFound",
    "CheckpointOptions",
    "CheckpointResult",
    "Cycle",
    "IntegrityError",
    "PauseError",
    "RestoreError",
    "ResumeOptions",
    "ResumeResult",
    "SelectionError",
    "SerializationError",
    "StoreError",
    "Verdict",
    "after_resume",
    "before_checkpoint",
    "checkpoint",
    "checkpoint_async",
    "journal",
    "load_ipython_extension",
    "resume",
    "resume_and_verify",
    "status",
    "steps",
    "verify",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'jupyter_pause' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Where jupyter-server finds the extension."""
    return [{"module": "jupyter_pause.server"}]


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext jupyter_pause``: register ``%checkpoint`` and ``%resume``."""
    from .kernel.magics import PauseMagics

    shell.register_magics(PauseMagics(shell))
