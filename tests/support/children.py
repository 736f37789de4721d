"""Child processes that tests start: output appended to a log, and on Linux ended with pytest."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: have the child stopped if pytest itself dies without tearing down."""
    import ctypes

    try:
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):  # no libc prctl: the fixture's teardown alone stops the child
        pass


def spawn(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start ``command`` in ``cwd`` with no input and its output appended to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
