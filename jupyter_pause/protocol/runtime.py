"""Small JSON files in the Jupyter runtime folder, which a server shares with the kernels it starts.

Written whole (a temporary name, then ``os.replace``: a reader sees the old file or the new one,
never half of it), read as a dict or not at all, and kept only while the process that owns them
runs. ``channel`` and ``nodestate`` keep their files here.

Only the standard library and ``jupyter_core``: the server imports this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_runtime_dir

#: Every file of jupyter-pause's in the runtime folder is named ``PREFIX<pid>...json``.
PREFIX = "jupyter-pause-"


def folder() -> Path:
    """The Jupyter runtime folder (``JUPYTER_RUNTIME_DIR``, which kernels inherit from their server)."""
    return Path(jupyter_runtime_dir())


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(json.dumps(data))
    os.replace(part, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def unlink(path: Path) -> bool:
    """Delete ``path``; True if this call deleted it (the claim)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def running(pid: int) -> bool:
    """Whether a process ``pid`` exists (it may be another program that reused the number)."""
    if pid <= 0:  # 0 and negative numbers name process groups, not a process
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True
