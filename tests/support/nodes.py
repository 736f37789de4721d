"""Nodes played by folders: each with its own HOME, Hugging Face cache and temporary folder.

``Node.run`` runs a script in a new Python process as that node would (its variables point into
its own folders, the datasets libraries offline) and returns the JSON it prints on its
``REPORT`` line (``Node.start`` and ``report`` do the same in two steps, so that processes of
several nodes run at once); ``Node.leave`` moves the node's folders away, as another node would
not have them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Node:
    """One node's folders under ``root``: ``home``, ``home/hf`` (HF_HOME), ``tmp``, ``nb`` (where it runs)."""

    root: Path

    def __post_init__(self) -> None:
        for name in ("home", "tmp", "nb"):
            (self.root / name).mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        """The environment of a process on this node."""
        mine = ("HF_", "XDG_", "TRANSFORMERS_", "JUPYTER_PAUSE_")
        kept = {k: v for k, v in os.environ.items() if not k.startswith(mine)}
        return {
            **kept,
            "HOME": str(self.root / "home"),
            "HF_HOME": str(self.root / "home" / "hf"),
            "TMPDIR": str(self.root / "tmp"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
            "MPLBACKEND": "Agg",
        }

    def start(self, script: str, *args: str) -> subprocess.Popen[str]:
        """Start ``script`` (with ``args``) in a new process here (see ``report``)."""
        return subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.root / "nb",
            env=self.env,
        )

    def run(self, script: str, *args: str, timeout: float = 180) -> dict[str, Any]:
        """Run ``script`` (with ``args``) in a new process here; the JSON of its ``REPORT`` line."""
        return report(self.start(script, *args), timeout)

    def leave(self) -> None:
        """Move this node's folders away: no other node has them."""
        self.root.rename(self.root.with_name(self.root.name + ".gone"))


def report(process: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The JSON a process started by ``Node.start`` printed on its ``REPORT`` line, once it exits."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-4000:]
    line = next(x for x in out.splitlines() if x.startswith("REPORT "))
    return json.loads(line[len("REPORT ") :])
